"""The ``runplane`` command's click group and its user verbs (docs/cli.md), on :class:`Client`
(runplane/cli.py adds ``serve`` and ``agent`` to the group; this module imports nothing of the
server).

``runplane submit STACK [-- CMD...]``, ``ls``, ``get``, ``logs [-f]``, ``cancel``,
``rerun``, ``stacks``, ``nodes``, ``pipeline run FILE``, ``session ...``, ``whoami``.
Results go to stdout (``-o json``: only JSON there); progress, phases and errors go to
stderr (rich). ``--follow`` exits with the job's own status: 0 succeeded, the job's exit
code when it failed with one (else 1), 124 timeout, 130 cancelled; 3 when the server
refused or could not be reached; 2 for a usage error.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import yaml
from rich.console import Console

from .api import TERMINAL, ApiError, Client, JSONObject
from .options import (
    FORMATS,
    TOKEN_HELP,
    URL_HELP,
    Server,
    Verbs,
    add_server_options,
    no_such_option,
    output_format,
    output_option,
)

R = TypeVar("R")
err = Console(stderr=True, highlight=False)

#: Exit statuses of ``--follow`` (and of a refused or unreachable server).
EXIT_TIMEOUT, EXIT_CANCELLED, EXIT_API = 124, 130, 3


def _client(ctx: click.Context) -> Client:
    root = ctx.find_root()
    server: Server = root.obj  # set by the group, for every command under it
    if server.client is None:
        server.client = root.with_resource(Client(server.url, server.token))
    return server.client


#: The next step after a 401 for a token that was sent (ApiError.hint's asks to send one).
REFUSED_TOKEN_HINT = (
    "the server refused the token this command sent (from --token, RUNPLANE_TOKEN or the "
    "config file): check that it is whole and not revoked or expired, or ask the operator "
    "for a new one (minted with POST /v1/auth/tokens), and pass it with --token"
)


def _token_sent() -> bool:
    """Whether the command's client sends a token (any command of the group)."""
    ctx = click.get_current_context(silent=True)
    server = ctx.find_root().obj if ctx is not None else None
    client = getattr(server, "client", None)
    return isinstance(client, Client) and client.config.token is not None


def _fail(error: ApiError, url: str) -> NoReturn:
    """Print the problem and the next step; exit 3 (a 401 included: with a token sent,
    the advice says the token was refused)."""
    err.print(f"[red]error:[/red] {error.detail}")
    hint = REFUSED_TOKEN_HINT if error.status == 401 and _token_sent() else error.hint(url)
    if hint:
        err.print(f"[dim]next:[/dim] {hint}")
    sys.exit(EXIT_API)


def _fetch(ctx: click.Context, call: Callable[[Client], R]) -> R:
    """``call`` on the context's client; a refusal prints its detail and next step and
    exits 3."""
    client = _client(ctx)
    try:
        return call(client)
    except ApiError as exc:
        _fail(exc, client.url)


def _shown(output: str, value: Any) -> bool:
    """With ``-o json``, print ``value`` as the only stdout and say so."""
    if output == "json":
        _json(value)
    return output == "json"


def _json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True))


def _table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Aligned columns on stdout, nothing cut (ids stay whole for copy and paste)."""
    cells = [list(columns)] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def _pairs(values: Iterable[str], what: str) -> dict[str, str]:
    found = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=what)
        found[key] = value
    return found


def _config_value(text: str) -> Any:
    """``3`` is a number, ``true`` a bool, ``"x"`` or ``x`` a string (JSON when it parses)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _mount_type(ref: str) -> str:
    if ref.endswith(".git") or ref.startswith("git@"):
        return "git"
    if ref.endswith((".tar.gz", ".tgz", ".tar", ".zip")):
        return "archive"
    return "file"


def exit_status(job: JSONObject) -> int:
    """The exit status ``--follow`` ends with for a finished job (docs/cli.md)."""
    phase = job.get("phase")
    if phase == "succeeded":
        return 0
    if phase == "timeout":
        return EXIT_TIMEOUT
    if phase == "cancelled":
        return EXIT_CANCELLED
    code = job.get("exit_code")
    return code if isinstance(code, int) and 0 < code < 256 else 1


@click.group(cls=Verbs, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar="RUNPLANE_URL", help=URL_HELP)
@click.option("--token", envvar="RUNPLANE_TOKEN", help=TOKEN_HELP)
@click.option(
    "-o", "--output", type=FORMATS, help="text or json (only JSON on stdout); or after the verb"
)
@click.pass_context
def cli(ctx: click.Context, url: str | None, token: str | None, output: str | None) -> None:
    """runplane: the job-orchestration control plane. `serve` runs the server, `agent` a
    node agent; the other commands submit and follow runs on a running server (docs/cli.md).

    `--url`, `--token` and `-o` go before or after the verb (after it, they win)."""
    ctx.obj = Server(url, token, output)


# -- jobs -----------------------------------------------------------------------------------


@cli.command()
@click.argument("stack")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="a config value")
@click.option("--env", "envs", multiple=True, metavar="KEY=VALUE", help="an env variable")
@click.option("--cpu", type=int, help="CPU cores")
@click.option("--ram", type=int, help="RAM in GB")
@click.option("--gpu", type=int, help="GPUs")
@click.option("--timeout", type=int, help="seconds before the job times out")
@click.option("--input", "inputs", multiple=True, metavar="PATH=REF", help="mount REF at PATH")
@click.option(
    "--output", "outputs", multiple=True, metavar="ARTIFACT=GLOB", help="keep files as an artifact"
)
@click.option("--project", help="project name")
@click.option("--priority", type=int, help="priority (default 100)")
@click.option(
    "--preemptible/--not-preemptible",
    default=None,
    help="whether a job of higher priority may stop it (default: the policy's)",
)
@click.option("--preempt-grace-sec", type=int, help="seconds from SIGTERM to SIGKILL if preempted")
@click.option(
    "--nodes",
    type=click.IntRange(1, 64),
    help="a multi-node job: N ranks, each on a node of its own with the limits above",
)
@click.option(
    "--sweep",
    "sweeps",
    multiple=True,
    metavar="KEY=V1,V2,...",
    help="a config key's values: submits a job array, one job per combination",
)
@click.option("-f", "--follow", is_flag=True, help="follow its logs and exit with its status")
@click.option(
    "-o",
    "output_format",
    type=FORMATS,
    callback=output_format,
    help="text (default) or json: only JSON on stdout",
)
@click.pass_context
def submit(
    ctx: click.Context,
    stack: str,
    command: tuple[str, ...],
    configs: tuple[str, ...],
    envs: tuple[str, ...],
    cpu: int | None,
    ram: int | None,
    gpu: int | None,
    timeout: int | None,
    inputs: tuple[str, ...],
    outputs: tuple[str, ...],
    project: str | None,
    priority: int | None,
    preemptible: bool | None,
    preempt_grace_sec: int | None,
    nodes: int | None,
    sweeps: tuple[str, ...],
    follow: bool,
    output_format: str,
) -> None:
    """Submit a run of STACK; a command after `--` replaces the stack's (an option of the
    command goes after `--`: before it, it is read as one of these). With `--sweep`, a job
    array: one job per combination of the swept config values."""
    body: JSONObject = {"stack": stack}
    if command:
        body["command"] = list(command)
    if configs:
        body["config"] = {k: _config_value(v) for k, v in _pairs(configs, "--config").items()}
    if envs:
        body["env"] = _pairs(envs, "--env")
    limits = {"cpu_cores": cpu, "ram_gb": ram, "gpu_count": gpu, "timeout_sec": timeout}
    if any(v is not None for v in limits.values()):
        body["limits"] = {k: v for k, v in limits.items() if v is not None}
    if inputs:
        body["inputs"] = [
            {"path": path, "ref": ref, "type": _mount_type(ref)}
            for path, ref in _pairs(inputs, "--input").items()
        ]
    if outputs:
        body["outputs"] = [
            {"artifact": name, "glob": glob} for name, glob in _pairs(outputs, "--output").items()
        ]
    if project:
        body["project"] = project
    body["priority"], body["preemptible"] = priority, preemptible
    body["preempt_grace_sec"], body["nodes"] = preempt_grace_sec, nodes
    body = {k: v for k, v in body.items() if v is not None}
    if sweeps:
        _submit_sweep(ctx, body, sweeps, follow, output_format)
        return
    _started(ctx, _fetch(ctx, lambda c: c.submit(body)), follow, output_format)


def _submit_sweep(
    ctx: click.Context, body: JSONObject, sweeps: tuple[str, ...], follow: bool, output: str
) -> None:
    """A sweep: the array's id, then each job's id (or the JSON answer)."""
    if follow:
        raise click.UsageError(
            "--follow takes one job; follow one of the array's jobs with `runplane logs -f "
            "JOB`, or list them with `runplane ls --array ARRAY`"
        )
    grid = {
        k: [_config_value(x) for x in v.split(",")] for k, v in _pairs(sweeps, "--sweep").items()
    }
    created = _fetch(ctx, lambda c: c.submit_batch({"job": body, "sweep": grid}))
    if _shown(output, created):
        return
    click.echo(created["array_id"])
    for job in created["jobs"]:
        click.echo(job["job_id"])
    err.print(f"{created['count']} jobs in array [bold]{created['array_id']}[/bold]")


def _started(ctx: click.Context, job: JSONObject, follow: bool, output: str) -> None:
    """A new job: its id (or JSON); with ``follow``, its run to the end and its status."""
    if not follow:
        _json(job) if output == "json" else click.echo(job["job_id"])
        return
    err.print(f"submitted [bold]{job['job_id']}[/bold] ({job['stack']})")
    ended = _follow(_client(ctx), job["job_id"], output)
    if output == "json":
        _json(ended)
    sys.exit(exit_status(ended))


def _follow(
    client: Client, job_id: str, output_format: str, *, logs_only: bool = False
) -> JSONObject:
    """Print the job's log lines (stdout, text mode) and its phases, wait reasons and
    metrics (stderr) until it ends; the finished job."""
    try:
        for event in client.events(job_id):
            kind = event.get("kind")
            if kind == "log" and output_format == "text":
                stream = event.get("stream")
                if stream == "system":
                    err.print(f"[dim]{event.get('line', '')}[/dim]")
                else:
                    click.echo(event.get("line", ""), err=stream == "stderr")
            elif kind == "phase" and not logs_only:
                phase = event.get("phase")
                reason = event.get("reason") or event.get("error") or ""
                where = f" on {event['node_id']}" if event.get("node_id") else ""
                err.print(f"[bold]{phase}[/bold]{where}" + (f": {reason}" if reason else ""))
            elif kind == "metric" and not logs_only:
                values = ", ".join(f"{k}={v}" for k, v in (event.get("values") or {}).items())
                step = event.get("step")
                at = f"step {step} " if step is not None else ""
                err.print(f"[cyan]metric[/cyan] {at}{values}")
        return client.job(job_id)
    except ApiError as exc:
        _fail(exc, client.url)


@cli.command(name="ls")
@click.option("--phase", help="only jobs in this phase")
@click.option("--stack", help="only jobs of this stack")
@click.option("--array", help="only the jobs of this job array (an arr_ id)")
@click.option("--limit", type=int, default=50, show_default=True)
@output_option
@click.pass_context
def list_jobs(
    ctx: click.Context,
    phase: str | None,
    stack: str | None,
    array: str | None,
    limit: int,
    output: str,
) -> None:
    """List jobs, newest first."""
    jobs = _fetch(ctx, lambda c: c.jobs(phase=phase, stack=stack, array=array, limit=limit))
    if _shown(output, jobs):
        return
    _table(
        ("JOB", "STACK", "PHASE", "NODE", "CREATED", "WAITING"),
        (
            (
                j["job_id"],
                j["stack"],
                j["phase"],
                j.get("node_id"),
                j.get("created_at"),
                j.get("wait_reason"),
            )
            for j in jobs
        ),
    )


@cli.command()
@click.argument("job_id")
@output_option
@click.pass_context
def get(ctx: click.Context, job_id: str, output: str) -> None:
    """Show one job."""
    job = _fetch(ctx, lambda c: c.job(job_id))
    if _shown(output, job):
        return
    for key in (
        "job_id",
        "stack",
        "phase",
        "node_id",
        "attempt",
        "retries",
        "preemptions",
        "exit_code",
        "error",
        "created_at",
        "started_at",
        "finished_at",
        "wait_reason",
    ):
        if job.get(key) not in (None, ""):
            click.echo(f"{key:12} {job[key]}")
    for name, value in sorted((job.get("final_metrics") or {}).items()):
        click.echo(f"{'metric':12} {name}={value}")
    for artifact in job.get("artifacts") or []:
        click.echo(
            f"{'artifact':12} {artifact['artifact']} {artifact.get('size', '')} {artifact['ref']}"
        )


@cli.command()
@click.argument("job_id")
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="follow until the job ends (resumes after a dropped connection)",
)
@output_option
@click.pass_context
def logs(ctx: click.Context, job_id: str, follow: bool, output: str) -> None:
    """Print a job's logs."""
    client = _client(ctx)
    if follow:
        if output == "json":
            try:
                for event in client.events(job_id):
                    click.echo(json.dumps(event))
            except ApiError as exc:
                _fail(exc, client.url)
            return
        _follow(client, job_id, output, logs_only=True)
        return
    lines = _fetch(ctx, lambda c: c.logs(job_id))
    if _shown(output, lines):
        return
    for line in lines:
        click.echo(line.get("line", ""), err=line.get("stream") == "stderr")


@cli.command()
@click.argument("job_id")
@output_option
@click.pass_context
def cancel(ctx: click.Context, job_id: str, output: str) -> None:
    """Cancel a job, or every live job of a job array (an arr_ id)."""
    if job_id.startswith("arr_"):
        done = _fetch(ctx, lambda c: c.cancel_array(job_id))
        if not _shown(output, done):
            click.echo(f"{done['array_id']}: {done['cancelled']} cancelled")
        return
    result = _fetch(ctx, lambda c: c.cancel(job_id))
    if not _shown(output, result):
        click.echo(
            f"{result['job_id']} {result['phase']}"
            + (" (killed on its node)" if result.get("killed_on_node") else "")
        )


@cli.command()
@click.argument("job_id")
@click.option("-f", "--follow", is_flag=True, help="follow the new job and exit with its status")
@output_option
@click.pass_context
def rerun(ctx: click.Context, job_id: str, follow: bool, output: str) -> None:
    """Run a job again with the same spec."""
    _started(ctx, _fetch(ctx, lambda c: c.rerun(job_id)), follow, output)


# -- catalog, fleet, identity ------------------------------------------------------------------


@cli.command()
@output_option
@click.pass_context
def stacks(ctx: click.Context, output: str) -> None:
    """List the stack catalog."""
    found = _fetch(ctx, lambda c: c.stacks())
    if _shown(output, found):
        return
    _table(
        ("STACK", "VERSION", "DESCRIPTION"),
        ((s["name"], s.get("version"), s.get("description", "")[:60]) for s in found),
    )


@cli.command()
@output_option
@click.pass_context
def nodes(ctx: click.Context, output: str) -> None:
    """List the fleet."""
    found = _fetch(ctx, lambda c: c.nodes())
    if _shown(output, found):
        return
    _table(
        ("NODE", "NAME", "STATUS", "CPU", "RAM GB", "GPUS", "JOBS"),
        (
            (
                n["id"],
                n.get("name"),
                n.get("status"),
                f"{n.get('used_cpu', 0)}/{n.get('cpu_cores', 0)}",
                f"{n.get('used_ram', 0)}/{n.get('ram_gb', 0)}",
                f"{n.get('used_gpu', 0)}/{n.get('gpus', 0)}",
                len(n.get("running_jobs") or []),
            )
            for n in found
        ),
    )


@cli.command()
@output_option
@click.pass_context
def whoami(ctx: click.Context, output: str) -> None:
    """Show who the token is."""
    me = _fetch(ctx, lambda c: c.whoami())
    if _shown(output, me):
        return
    who = me.get("subject") or me.get("name") or ""
    click.echo(f"{me.get('kind')} {who} org {me.get('org_id') or '-'}")
    click.echo(f"scopes {' '.join(me.get('scopes') or []) or '-'}")


# -- pipelines and sessions ----------------------------------------------------------------------


def _load(path: Path) -> JSONObject:
    text = path.read_text()
    try:
        value = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise click.BadParameter(f"{path} is not valid JSON or YAML: {exc}") from None
    if not isinstance(value, dict):
        raise click.BadParameter(f"{path} must hold an object (a mapping)")
    return value


@cli.group(cls=Verbs)
def pipeline() -> None:
    """DAG pipelines."""


@pipeline.command(name="run")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-f", "--follow", is_flag=True, help="wait for the run, showing its stages")
@output_option
@click.pass_context
def pipeline_run(ctx: click.Context, file: Path, follow: bool, output: str) -> None:
    """Start a pipeline from FILE (YAML or JSON: {stages: [...]})."""
    client = _client(ctx)
    try:
        run = client.create_pipeline(_load(file))
        run_id = run["pipeline_run_id"]
        if follow:
            seen: dict[str, str] = {}
            while run["status"] not in TERMINAL:
                for stage in run.get("stages") or []:
                    if seen.get(stage["name"]) != stage["phase"]:
                        seen[stage["name"]] = stage["phase"]
                        err.print(f"[bold]{stage['name']}[/bold] {stage['phase']}")
                time.sleep(1)
                run = client.pipeline(run_id)
    except ApiError as exc:
        _fail(exc, client.url)
    if output == "json":
        _json(run)
    else:
        click.echo(run_id if not follow else f"{run_id} {run['status']}")
    if follow:
        sys.exit(0 if run["status"] == "succeeded" else 1)


@cli.group(cls=Verbs)
def session() -> None:
    """Interactive sessions (pods)."""


@session.command(name="create")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@output_option
@click.pass_context
def session_create(ctx: click.Context, file: Path, output: str) -> None:
    """Start a session from FILE (YAML or JSON: {pod: {services: [...]}})."""
    _session_call(ctx, output, lambda c: c.create_session(_load(file)))


@session.command(name="ls")
@output_option
@click.pass_context
def session_ls(ctx: click.Context, output: str) -> None:
    """List sessions."""
    found = _fetch(ctx, lambda c: c.sessions())
    if _shown(output, found):
        return
    _table(
        ("SESSION", "NAME", "PHASE", "JOB", "KEEPALIVE"),
        (
            (s["id"], s.get("name"), s["phase"], s.get("job_id"), s.get("last_keepalive"))
            for s in found
        ),
    )


@session.command(name="get")
@click.argument("session_id")
@output_option
@click.pass_context
def session_get(ctx: click.Context, session_id: str, output: str) -> None:
    """Show a session with its services."""
    _session_call(ctx, output, lambda c: c.session(session_id))


@session.command(name="keepalive")
@click.argument("session_id")
@output_option
@click.pass_context
def session_keepalive(ctx: click.Context, session_id: str, output: str) -> None:
    """Keep a session alive."""
    _session_call(ctx, output, lambda c: c.keepalive(session_id))


@session.command(name="stop")
@click.argument("session_id")
@output_option
@click.pass_context
def session_stop(ctx: click.Context, session_id: str, output: str) -> None:
    """Stop a session."""
    _session_call(ctx, output, lambda c: c.stop_session(session_id))


def _session_call(ctx: click.Context, output: str, call: Callable[[Client], JSONObject]) -> None:
    view = _fetch(ctx, call)
    if _shown(output, view):
        return
    click.echo(f"{view['id']} {view['phase']}")
    for service in view.get("services") or []:
        click.echo(f"  {service['name']} ({service.get('stack') or service.get('image')})")


add_server_options(cli)  # before runplane/cli.py adds serve and agent: they take neither


def run(argv: Sequence[str]) -> int:
    """The ``runplane`` command (runplane/cli.py adds ``serve``, ``agent`` and ``--version``):
    its exit status, a command's own (an int it returns) or 0; 2 for a usage error."""
    try:
        status = cli.main(args=list(argv), prog_name="runplane", standalone_mode=False)
    except click.ClickException as exc:
        shown = no_such_option(exc) if isinstance(exc, click.NoSuchOption) else exc
        shown.show()
        return shown.exit_code
    except click.Abort:
        err.print("aborted")
        return 1
    return status if isinstance(status, int) else 0
