"""The ``runplane secret``, ``schedule`` and ``webhook`` verbs (docs/cli.md): what a team
sets up once and looks at often. A secret's value goes in (from ``--value``, a file, or
stdin) and is never printed or logged; a webhook's signing secret is printed once, when the
server answers it."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .api import JSONObject
from .common import err, fetch, list_table, load_file, print_json, shown, table
from .options import Verbs, output_option

ORG_HELP = "the org (only the admin token names one: it acts for every org)"


def _org_option(fn: click.decorators.FC) -> click.decorators.FC:
    return click.option("--org", metavar="ORG_ID", help=ORG_HELP)(fn)


# -- secrets ----------------------------------------------------------------------------------


@click.group(cls=Verbs)
def secret() -> None:
    """An org's secrets, referenced from a job's env as ${secrets.NAME}."""


@secret.command(name="ls")
@_org_option
@output_option
@click.pass_context
def secret_ls(ctx: click.Context, org: str | None, output: str) -> None:
    """List the org's secrets: names, who set them and when, never values."""
    list_table(
        ctx,
        output,
        lambda c: c.secrets(org=org),
        ("NAME", "ORG", "UPDATED", "UPDATED BY", "CREATED"),
        lambda s: (
            s["name"],
            s.get("org_id"),
            s.get("updated_at"),
            s.get("updated_by"),
            s.get("created_at"),
        ),
    )


@secret.command(name="set")
@click.argument("name")
@click.option("--value", help="the value (it stays in your shell history: prefer stdin)")
@click.option(
    "--from-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="read the value from this file",
)
@_org_option
@output_option
@click.pass_context
def secret_set(
    ctx: click.Context,
    name: str,
    value: str | None,
    from_file: Path | None,
    org: str | None,
    output: str,
) -> None:
    """Set secret NAME (created, or replaced). The value comes from --value, --from-file,
    or else stdin (a hidden prompt on a terminal); one trailing newline is dropped. The
    value is never printed."""
    if value is not None and from_file is not None:
        raise click.UsageError("give --value or --from-file, not both")
    if from_file is not None:
        value = from_file.read_text()
    elif value is None:
        value = _stdin_value(name)
    value = value.removesuffix("\n").removesuffix("\r")
    if not value:
        raise click.UsageError("the value is empty: a secret holds 1 to 65,536 characters")
    stored = fetch(ctx, lambda c: c.set_secret(name, value, org=org))
    if shown(output, stored):
        return
    how = "created" if stored.get("created_at") == stored.get("updated_at") else "replaced"
    click.echo(f"secret {stored['name']} {how} in {stored.get('org_id')}")
    err.print(f"use it in a job's env as ${{secrets.{stored['name']}}}")


def _stdin_value(name: str) -> str:
    """The value from stdin: a hidden prompt on a terminal, else all of stdin."""
    if sys.stdin.isatty():
        entered: str = click.prompt(f"value of {name}", hide_input=True, err=True)
        return entered
    return sys.stdin.read()


@secret.command(name="rm")
@click.argument("name")
@_org_option
@output_option
@click.pass_context
def secret_rm(ctx: click.Context, name: str, org: str | None, output: str) -> None:
    """Delete secret NAME (jobs already submitted that use it run without it)."""
    fetch(ctx, lambda c: c.delete_secret(name, org=org))
    if not shown(output, {"deleted": name}):
        click.echo(f"secret {name} deleted")


# -- schedules --------------------------------------------------------------------------------


@click.group(cls=Verbs)
def schedule() -> None:
    """Jobs or pipelines fired on a cron expression or an interval."""


def _when(s: JSONObject) -> str:
    if s.get("cron"):
        return f"cron {s['cron']} {s.get('timezone') or 'UTC'}"
    return f"every {s.get('every')}"


@schedule.command(name="ls")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@output_option
@click.pass_context
def schedule_ls(ctx: click.Context, limit: int, output: str) -> None:
    """List schedules, newest first."""
    list_table(
        ctx,
        output,
        lambda c: c.schedules(limit=limit),
        ("SCHEDULE", "NAME", "WHEN", "STATE", "NEXT RUN", "LAST RUN", "LAST ERROR"),
        lambda s: (
            s["schedule_id"],
            s.get("name"),
            _when(s),
            "paused" if s.get("suspend") else "active",
            s.get("next_run_at") or "-",
            s.get("last_run_at") or "-",
            s.get("last_error") or "",
        ),
    )


@schedule.command(name="create")
@click.option(
    "-f",
    "--file",
    "file",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="the schedule (YAML or JSON): {name, cron | every, timezone, job | pipeline, ...}",
)
@output_option
@click.pass_context
def schedule_create(ctx: click.Context, file: Path, output: str) -> None:
    """Create a schedule from a file (docs/schedules.md); prints its id."""
    body = load_file(file)
    made = fetch(ctx, lambda c: c.create_schedule(body))
    if shown(output, made):
        return
    click.echo(made["schedule_id"])
    err.print(f"{made.get('name')}: {_when(made)}, next run {made.get('next_run_at') or '-'}")


@schedule.command(name="get")
@click.argument("schedule_id")
@output_option
@click.pass_context
def schedule_get(ctx: click.Context, schedule_id: str, output: str) -> None:
    """Show a schedule and its last runs."""
    found = fetch(ctx, lambda c: c.schedule(schedule_id))
    if shown(output, found):
        return
    _schedule_lines(found)


def _schedule_lines(s: JSONObject) -> None:
    what = "job" if s.get("job") else "pipeline"
    for key, value in (
        ("schedule_id", s["schedule_id"]),
        ("name", s.get("name")),
        ("when", _when(s)),
        ("state", "paused" if s.get("suspend") else "active"),
        ("concurrency", s.get("concurrency")),
        ("fires", f"a {what}" + (f" of {s['job'].get('stack')}" if s.get("job") else "")),
        ("next_run_at", s.get("next_run_at") or "-"),
        ("last_run_at", s.get("last_run_at") or "-"),
        ("last_error", s.get("last_error")),
        ("created_by", s.get("created_by")),
    ):
        if value not in (None, ""):
            click.echo(f"{key:12} {value}")
    runs = s.get("runs") or []
    if runs:
        click.echo()
        table(
            ("DUE", "OUTCOME", "CREATED", "DETAIL"),
            (
                (
                    r.get("due_at"),
                    r.get("outcome"),
                    r.get("job_id") or r.get("pipeline_run_id"),
                    r.get("detail"),
                )
                for r in runs
            ),
        )


def _suspend(ctx: click.Context, schedule_id: str, suspend: bool, output: str) -> None:
    changed = fetch(ctx, lambda c: c.patch_schedule(schedule_id, {"suspend": suspend}))
    if not shown(output, changed):
        state = "paused" if changed.get("suspend") else "active"
        click.echo(f"{changed['schedule_id']} {state}")


@schedule.command(name="pause")
@click.argument("schedule_id")
@output_option
@click.pass_context
def schedule_pause(ctx: click.Context, schedule_id: str, output: str) -> None:
    """Stop a schedule firing (it is kept; `resume` starts it again)."""
    _suspend(ctx, schedule_id, True, output)


@schedule.command(name="resume")
@click.argument("schedule_id")
@output_option
@click.pass_context
def schedule_resume(ctx: click.Context, schedule_id: str, output: str) -> None:
    """Start a paused schedule again from now (no backlog fires)."""
    _suspend(ctx, schedule_id, False, output)


@schedule.command(name="rm")
@click.argument("schedule_id")
@output_option
@click.pass_context
def schedule_rm(ctx: click.Context, schedule_id: str, output: str) -> None:
    """Delete a schedule (what it created is left as it is)."""
    done = fetch(ctx, lambda c: c.delete_schedule(schedule_id))
    if not shown(output, done):
        click.echo(f"schedule {done['deleted']} deleted")


# -- webhooks ---------------------------------------------------------------------------------


@click.group(cls=Verbs)
def webhook() -> None:
    """Outgoing webhooks: a signed POST when a run ends (docs/webhooks.md)."""


@webhook.command(name="ls")
@_org_option
@output_option
@click.pass_context
def webhook_ls(ctx: click.Context, org: str | None, output: str) -> None:
    """List the org's webhook endpoints (never their secrets)."""
    list_table(
        ctx,
        output,
        lambda c: c.webhooks(org=org),
        ("WEBHOOK", "URL", "EVENTS", "ENABLED", "CREATED"),
        lambda w: (
            w["id"],
            w.get("url"),
            ",".join(w.get("events") or []) or "all",
            "yes" if w.get("enabled", True) else "no",
            w.get("created_at"),
        ),
    )


@webhook.command(name="create")
@click.argument("endpoint", metavar="URL")
@click.option(
    "--event",
    "events",
    multiple=True,
    metavar="EVENT",
    help="run.succeeded, run.failed or run.cancelled (repeat it; none: every event)",
)
@_org_option
@output_option
@click.pass_context
def webhook_create(
    ctx: click.Context, endpoint: str, events: tuple[str, ...], org: str | None, output: str
) -> None:
    """Register URL for run events; prints its id and, this once, its signing secret."""
    body: JSONObject = {"url": endpoint, "events": list(events)}
    if org:
        body["org_id"] = org
    made = fetch(ctx, lambda c: c.create_webhook(body))
    if output == "json":
        print_json(made)
        return
    click.echo(f"{'webhook':8} {made['id']}")
    click.echo(f"{'secret':8} {made['secret']}")
    err.print(
        "the signing secret is shown only now: store it where your receiver can read it "
        "(docs/webhooks.md says how to check a delivery's signature)"
    )


@webhook.command(name="rm")
@click.argument("webhook_id")
@output_option
@click.pass_context
def webhook_rm(ctx: click.Context, webhook_id: str, output: str) -> None:
    """Delete a webhook endpoint and its deliveries."""
    done = fetch(ctx, lambda c: c.delete_webhook(webhook_id))
    if not shown(output, done):
        click.echo(f"webhook {done['deleted']} deleted")


@webhook.command(name="test")
@click.argument("webhook_id")
@output_option
@click.pass_context
def webhook_test(ctx: click.Context, webhook_id: str, output: str) -> None:
    """Queue a signed `ping` delivery to the endpoint (see it with `deliveries`)."""
    done = fetch(ctx, lambda c: c.test_webhook(webhook_id))
    if not shown(output, done):
        click.echo(f"{done['delivery_id']} {done['status']}")


@webhook.command(name="deliveries")
@click.argument("webhook_id")
@output_option
@click.pass_context
def webhook_deliveries(ctx: click.Context, webhook_id: str, output: str) -> None:
    """The endpoint's deliveries, newest first (up to 100)."""
    list_table(
        ctx,
        output,
        lambda c: c.deliveries(webhook_id),
        ("DELIVERY", "EVENT", "STATUS", "ATTEMPTS", "HTTP", "JOB", "CREATED", "ERROR"),
        lambda d: (
            d["id"],
            d.get("event"),
            d.get("status"),
            d.get("attempts"),
            d.get("response_code") or "-",
            d.get("job_id") or "-",
            d.get("created_at"),
            d.get("error") or "",
        ),
    )


#: The verbs runplane/client/cli.py registers.
VERBS = (secret, schedule, webhook)
