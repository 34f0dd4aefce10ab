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
from collections.abc import Sequence

import click
from rich.markup import escape

from . import catalog, files, flows, manage, tables, watch
from .api import ApiError, Client, JSONObject
from .common import (
    client_of,
    config_value,
    err,
    exit_status,
    fail,
    fetch,
    mount_type,
    pairs,
    print_json,
    shown,
    table,
)
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
        body["config"] = {k: config_value(v) for k, v in pairs(configs, "--config").items()}
    if envs:
        body["env"] = pairs(envs, "--env")
    limits = {"cpu_cores": cpu, "ram_gb": ram, "gpu_count": gpu, "timeout_sec": timeout}
    if any(v is not None for v in limits.values()):
        body["limits"] = {k: v for k, v in limits.items() if v is not None}
    if inputs:
        body["inputs"] = [
            {"path": path, "ref": ref, "type": mount_type(ref)}
            for path, ref in pairs(inputs, "--input").items()
        ]
    if outputs:
        body["outputs"] = [
            {"artifact": name, "glob": glob} for name, glob in pairs(outputs, "--output").items()
        ]
    if project:
        body["project"] = project
    body["priority"], body["preemptible"] = priority, preemptible
    body["preempt_grace_sec"], body["nodes"] = preempt_grace_sec, nodes
    body = {k: v for k, v in body.items() if v is not None}
    if sweeps:
        _submit_sweep(ctx, body, sweeps, follow, output_format)
        return
    _started(ctx, fetch(ctx, lambda c: c.submit(body)), follow, output_format)


def _submit_sweep(
    ctx: click.Context, body: JSONObject, sweeps: tuple[str, ...], follow: bool, output: str
) -> None:
    """A sweep: the array's id, then each job's id (or the JSON answer)."""
    if follow:
        raise click.UsageError(
            "--follow takes one job; follow one of the array's jobs with `runplane logs -f "
            "JOB`, or list them with `runplane ls --array ARRAY`"
        )
    grid = {k: [config_value(x) for x in v.split(",")] for k, v in pairs(sweeps, "--sweep").items()}
    created = fetch(ctx, lambda c: c.submit_batch({"job": body, "sweep": grid}))
    if shown(output, created):
        return
    click.echo(created["array_id"])
    for job in created["jobs"]:
        click.echo(job["job_id"])
    err.print(f"{created['count']} jobs in array [bold]{created['array_id']}[/bold]")


def _started(ctx: click.Context, job: JSONObject, follow: bool, output: str) -> None:
    """A new job: its id (or JSON); with ``follow``, its run to the end and its status."""
    if not follow:
        print_json(job) if output == "json" else click.echo(job["job_id"])
        return
    err.print(f"submitted [bold]{job['job_id']}[/bold] ({job['stack']})")
    ended = _follow(client_of(ctx), job["job_id"], output)
    if output == "json":
        print_json(ended)
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
                where = (
                    f" on {_node_name(client, event['node_id'])}" if event.get("node_id") else ""
                )
                said = f"{where}: {reason}" if reason else where
                err.print(f"[bold]{phase}[/bold]{escape(said)}", soft_wrap=True)
            elif kind == "metric" and not logs_only:
                values = ", ".join(f"{k}={v}" for k, v in (event.get("values") or {}).items())
                step = event.get("step")
                at = f"step {step} " if step is not None else ""
                err.print(f"[cyan]metric[/cyan] {at}{values}")
        return client.job(job_id)
    except ApiError as exc:
        fail(exc, client.url)
    except KeyboardInterrupt:
        watch.stopped(f"{job_id} keeps running: cancel it with runplane cancel {job_id}")


ATTEMPT_HELP = (
    "In -o json, `attempt` is the job's run number, 1-based: 1 at its first assignment to a "
    "node, one more at each new assignment after a requeue or a preemption (0 before the "
    "first); `attempts` counts infrastructure requeues: times the job went back to the "
    "queue because its node was lost or drained mid-run (0 for a job that ran once). "
    "docs/jobs.md explains both."
)


def _node_name(client: Client, node_id: str) -> str:
    """``local (node_...)``: the node's name beside its id (the id alone if unknown)."""
    names = {n["id"]: n.get("name") for n in client.nodes()}
    return f"{names[node_id]} ({node_id})" if names.get(node_id) else node_id


@cli.command(name="ls", epilog=ATTEMPT_HELP)
@click.option("--phase", help="only jobs in this phase")
@click.option("--stack", help="only jobs of this stack")
@click.option("--project", help="only jobs of this project")
@click.option("--pipeline", help="only the stage jobs of this pipeline run (a plr_ id)")
@click.option("--node", help="only jobs placed on this node (its name or id)")
@click.option(
    "--array",
    help="the jobs of this job array (an arr_ id) as its sweep table: index, job, phase, "
    "the config values that differ, the final metrics (the best of each marked *)",
)
@click.option("--limit", type=int, default=50, show_default=True)
@output_option
@click.pass_context
def list_jobs(
    ctx: click.Context,
    phase: str | None,
    stack: str | None,
    project: str | None,
    pipeline: str | None,
    node: str | None,
    array: str | None,
    limit: int,
    output: str,
) -> None:
    """List jobs, newest first: id, name (a stage's, else the command's first line), stack,
    phase, node name, duration (live while running), created, why it waits."""
    client = client_of(ctx)
    try:
        names = {n["id"]: n.get("name") or n["id"] for n in client.nodes()}
        node_id = next((i for i, n in names.items() if node in (i, n)), node)
        filters = {"phase": phase, "stack": stack, "project": project, "pipeline": pipeline}
        limit = max(limit, 5000) if array else limit  # a sweep table has every job
        jobs = client.find_jobs(limit=limit, node=node_id, array=array, **filters)
        if array:
            _sweep_table(client, array, jobs, output)
            return
    except ApiError as exc:
        fail(exc, client.url)
    if shown(output, jobs):
        return
    table(
        ("JOB", "NAME", "STACK", "PHASE", "NODE", "DURATION", "CREATED", "WAITING"),
        tables.job_rows(jobs, names, fetch(ctx, _stacks)),
    )


def _stacks(client: Client) -> dict[str, JSONObject]:
    """The stack catalog by name (a job running its stack's own program is named by it)."""
    return {s["name"]: s for s in client.stacks()}


def _sweep_table(client: Client, array_id: str, jobs: list[JSONObject], output: str) -> None:
    sweep = tables.sweep(array_id, jobs, client.stacks())
    if shown(output, sweep):
        return
    headers, rows = tables.sweep_rows(sweep)
    table(headers, rows)


@cli.command(epilog=ATTEMPT_HELP)
@click.argument("job_id")
@output_option
@click.pass_context
def get(ctx: click.Context, job_id: str, output: str) -> None:
    """Show one job: its name, phase, node (name and id), run number, requeues, retries,
    exit code, times (relative, then the absolute one), wait reason, final metrics and
    artifacts."""
    job = fetch(ctx, lambda c: c.job(job_id))
    if shown(output, job):
        return
    node = job.get("node_id")
    for key, value in (
        ("job_id", job["job_id"]),
        ("name", tables.job_name(job, fetch(ctx, _stacks))),
        ("stack", job["stack"]),
        ("phase", job["phase"]),
        ("node", node and fetch(ctx, lambda c: _node_name(c, node))),
        ("attempt", job.get("attempt")),
        ("attempts", job.get("attempts") or None),
        ("retries", job.get("retries")),
        ("preemptions", job.get("preemptions")),
        ("exit_code", job.get("exit_code")),
        ("error", job.get("error")),
        ("duration", tables.job_duration(job)),
        *((at, _when(job.get(at))) for at in ("created_at", "started_at", "finished_at")),
        ("wait_reason", job.get("wait_reason")),
    ):
        if value not in (None, ""):
            click.echo(f"{key:12} {value}")
    for name, value in sorted((job.get("final_metrics") or {}).items()):
        click.echo(f"{'metric':12} {name}={value}")
    for artifact in job.get("artifacts") or []:
        click.echo(
            f"{'artifact':12} {artifact['artifact']} {artifact.get('size', '')} {artifact['ref']}"
        )


def _when(iso: str | None) -> str:
    """``3 min ago (2026-11-27T10:33:00.524Z)``."""
    return f"{tables.ago(iso)} ({iso})" if iso else ""


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
    client = client_of(ctx)
    if follow:
        if output == "json":
            try:
                for event in client.events(job_id):
                    click.echo(json.dumps(event))
            except ApiError as exc:
                fail(exc, client.url)
            return
        _follow(client, job_id, output, logs_only=True)
        return
    lines = fetch(ctx, lambda c: c.logs(job_id))
    if shown(output, lines):
        return
    for line in lines:
        click.echo(line.get("line", ""), err=line.get("stream") == "stderr")


@cli.command()
@click.argument("job_id")
@output_option
@click.pass_context
def cancel(ctx: click.Context, job_id: str, output: str) -> None:
    """Cancel a job, or every live job of a job array (an arr_ id). A job that had already
    ended is left as it was: stderr says so and the exit status is 0."""
    if job_id.startswith("arr_"):
        done = fetch(ctx, lambda c: c.cancel_array(job_id))
        if not shown(output, done):
            click.echo(f"{done['array_id']}: {done['cancelled']} cancelled")
        return
    result = fetch(ctx, lambda c: c.cancel(job_id))
    if shown(output, result):
        return
    if result.get("cancelled") is False:
        err.print(f"{result['job_id']} already {result['phase']}: nothing to cancel")
        return
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
    _started(ctx, fetch(ctx, lambda c: c.rerun(job_id)), follow, output)


for verb in (
    catalog.stacks,
    catalog.nodes,
    catalog.whoami,
    flows.pipeline,
    flows.session,
    *manage.VERBS,
    *files.VERBS,
):
    cli.add_command(verb)
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
