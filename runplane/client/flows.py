"""The ``runplane pipeline`` and ``runplane session`` verbs (docs/cli.md)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import click

from .api import TERMINAL, ApiError, Client, JSONObject
from .common import client_of, err, fail, fetch, load_file, print_json, shown, table
from .options import Verbs, output_option


@click.group(cls=Verbs)
def pipeline() -> None:
    """DAG pipelines."""


@pipeline.command(name="run")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-f", "--follow", is_flag=True, help="wait for the run, showing its stages")
@output_option
@click.pass_context
def pipeline_run(ctx: click.Context, file: Path, follow: bool, output: str) -> None:
    """Start a pipeline from FILE (YAML or JSON: {stages: [...]})."""
    client = client_of(ctx)
    try:
        run = client.create_pipeline(load_file(file))
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
        fail(exc, client.url)
    if output == "json":
        print_json(run)
    else:
        click.echo(run_id if not follow else f"{run_id} {run['status']}")
    if follow:
        sys.exit(0 if run["status"] == "succeeded" else 1)


@click.group(cls=Verbs)
def session() -> None:
    """Interactive sessions (pods)."""


@session.command(name="create")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@output_option
@click.pass_context
def session_create(ctx: click.Context, file: Path, output: str) -> None:
    """Start a session from FILE (YAML or JSON: {pod: {services: [...]}})."""
    _session_call(ctx, output, lambda c: c.create_session(load_file(file)))


@session.command(name="ls")
@output_option
@click.pass_context
def session_ls(ctx: click.Context, output: str) -> None:
    """List sessions."""
    found = fetch(ctx, lambda c: c.sessions())
    if shown(output, found):
        return
    table(
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
    view = fetch(ctx, call)
    if shown(output, view):
        return
    click.echo(f"{view['id']} {view['phase']}")
    for service in view.get("services") or []:
        click.echo(f"  {service['name']} ({service.get('stack') or service.get('image')})")
