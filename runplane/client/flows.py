"""The ``runplane pipeline`` and ``runplane session`` verbs (docs/cli.md)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from . import tables, watch
from .api import ApiError, Client, JSONObject
from .common import client_of, err, fail, fetch, list_table, load_file, print_json, shown, table
from .options import Verbs, output_option


@click.group(cls=Verbs)
def pipeline() -> None:
    """DAG pipelines."""


@pipeline.command(name="run")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="wait for the run: each stage's phase and wait reason as they change, every "
    "stage's final phase and exit code at the end (stderr); exits 0 only if it succeeded. "
    "Ctrl-C stops following, not the run (exit 130)",
)
@output_option
@click.pass_context
def pipeline_run(ctx: click.Context, file: Path, follow: bool, output: str) -> None:
    """Start a pipeline from FILE (YAML or JSON: {stages: [...]}); prints its plr_ id at
    once (stdout)."""
    client = client_of(ctx)
    try:
        run = client.create_pipeline(load_file(file))
        run_id = run["pipeline_run_id"]
        if output == "json" and not follow:
            print_json(run)
            return
        if output == "json":
            err.print(run_id)
        else:
            click.echo(run_id)  # at once: the id to cancel or look at it by
        if follow:
            run = watch.follow_pipeline(client, run)
    except ApiError as exc:
        fail(exc, client.url)
    if follow:
        print_json(run) if output == "json" else click.echo(f"{run_id} {run['status']}")
        sys.exit(0 if run["status"] == "succeeded" else 1)


@pipeline.command(name="ls")
@click.option("--limit", type=int, default=50, show_default=True)
@output_option
@click.pass_context
def pipeline_ls(ctx: click.Context, limit: int, output: str) -> None:
    """List pipeline runs, newest first."""
    list_table(
        ctx,
        output,
        lambda c: c.pipelines(limit=limit),
        ("PIPELINE", "NAME", "STATUS", "STAGES", "CREATED"),
        lambda r: (
            r["pipeline_run_id"],
            r.get("name"),
            r["status"],
            _progress(r),
            tables.ago(r.get("created_at")),
        ),
    )


def _progress(run: JSONObject) -> str:
    counts = [f"{n} {phase}" for phase, n in (run.get("progress") or {}).items() if n]
    return ", ".join(counts) or str(run.get("stage_count", ""))


@pipeline.command(name="get")
@click.argument("run_id")
@output_option
@click.pass_context
def pipeline_get(ctx: click.Context, run_id: str, output: str) -> None:
    """Show a pipeline run: its status, and each stage's phase, job, exit code and wait
    reason or error."""
    run = fetch(ctx, lambda c: c.pipeline(run_id))
    if shown(output, run):
        return
    jobs = fetch(ctx, lambda c: watch.stage_jobs(c, run_id))
    click.echo(" ".join(x for x in (run_id, run.get("name"), run["status"]) if x))
    table(
        ("STAGE", "PHASE", "JOB", "EXIT", "WAITING / ERROR"),
        (_stage_row(s, jobs.get(s.get("job_id") or "")) for s in run.get("stages") or []),
    )


def _stage_row(stage: JSONObject, job: JSONObject | None) -> tuple[object, ...]:
    why = (job or {}).get("wait_reason") or stage.get("wait_reason") or stage.get("error")
    code = (job or {}).get("exit_code")
    return (stage["name"], stage["phase"], stage.get("job_id"), code, why)


@pipeline.command(name="cancel")
@click.argument("run_id")
@output_option
@click.pass_context
def pipeline_cancel(ctx: click.Context, run_id: str, output: str) -> None:
    """Cancel a pipeline run: its pending stages, and its queued or running stage jobs."""
    run = fetch(ctx, lambda c: c.cancel_pipeline(run_id))
    if not shown(output, run):
        click.echo(f"{run_id} {run['status']}")


@click.group(cls=Verbs)
def session() -> None:
    """Interactive sessions (pods)."""


@session.command(name="create")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="wait while it is launching, showing why its pod job waits as that changes "
    "(stderr); Ctrl-C stops waiting, not the session",
)
@output_option
@click.pass_context
def session_create(ctx: click.Context, file: Path, follow: bool, output: str) -> None:
    """Start a session from FILE (YAML or JSON: {pod: {services: [...]}}); while it is
    launching, why its pod job waits (a node to place it on, say)."""
    client = client_of(ctx)
    try:
        view = client.create_session(load_file(file))
        if follow:
            if output != "json":
                click.echo(view["id"])
            view = watch.follow_session(client, view)
    except ApiError as exc:
        fail(exc, client.url)
    if not shown(output, view):
        _show_session(client, view)


@session.command(name="ls")
@output_option
@click.pass_context
def session_ls(ctx: click.Context, output: str) -> None:
    """List sessions."""
    list_table(
        ctx,
        output,
        lambda c: c.sessions(),
        ("SESSION", "NAME", "PHASE", "JOB", "KEEPALIVE"),
        lambda s: (s["id"], s.get("name"), s["phase"], s.get("job_id"), s.get("last_keepalive")),
    )


@session.command(name="get")
@click.argument("session_id")
@output_option
@click.pass_context
def session_get(ctx: click.Context, session_id: str, output: str) -> None:
    """Show a session: its phase, its services and, while it is launching, why its pod job
    waits."""
    _session_call(ctx, output, lambda c: c.session(session_id))


@session.command(name="keepalive")
@click.argument("session_ids", metavar="SESSION_ID...", nargs=-1, required=True)
@output_option
@click.pass_context
def session_keepalive(ctx: click.Context, session_ids: tuple[str, ...], output: str) -> None:
    """Keep sessions alive: one is shown like `get`; several go in one request (a table of
    those kept; the ids not found or not live on stderr, and exit 3 if there are any)."""
    if len(session_ids) == 1:
        _session_call(ctx, output, lambda c: c.keepalive(session_ids[0]))
        return
    answer = fetch(ctx, lambda c: c.keepalive_many(list(session_ids)))
    if not shown(output, answer):
        table(
            ("SESSION", "PHASE", "KEEPALIVE"),
            ((s["id"], s["phase"], s["last_keepalive"]) for s in answer["sessions"]),
        )
        for key, words in (("not_found", "not found"), ("not_live", "not live")):
            if answer[key]:
                watch.say(f"{words}: {' '.join(answer[key])}")
    if answer["not_found"] or answer["not_live"]:
        sys.exit(3)


@session.command(name="stop")
@click.argument("session_id")
@output_option
@click.pass_context
def session_stop(ctx: click.Context, session_id: str, output: str) -> None:
    """Stop a session."""
    _session_call(ctx, output, lambda c: c.stop_session(session_id))


def _session_call(ctx: click.Context, output: str, call: Callable[[Client], JSONObject]) -> None:
    view = fetch(ctx, call)
    if not shown(output, view):
        _show_session(client_of(ctx), view)


def _show_session(client: Client, view: JSONObject) -> None:
    """The session's id and phase (stdout), its services, then why its pod job waits while
    it is launching, or its error (stderr)."""
    click.echo(f"{view['id']} {view['phase']}")
    for service in view.get("services") or []:
        needs = ", ".join(service.get("needs") or [])
        click.echo(
            f"  {service['name']} ({service.get('stack') or service.get('image')})"
            + (f" after {needs}" if needs else "")
        )
    try:
        why = watch.pod_wait(client, view)
    except ApiError as exc:
        fail(exc, client.url)
    if why:
        watch.say(f"waiting: {why}")
    elif view.get("error"):
        watch.say(f"error: {view['error']}")
