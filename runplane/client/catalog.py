"""The ``runplane stacks``, ``nodes`` and ``whoami`` verbs (docs/cli.md)."""

from __future__ import annotations

import click

from .common import fetch, shown, table
from .options import output_option


@click.command()
@output_option
@click.pass_context
def stacks(ctx: click.Context, output: str) -> None:
    """List the stack catalog."""
    found = fetch(ctx, lambda c: c.stacks())
    if shown(output, found):
        return
    table(
        ("STACK", "VERSION", "DESCRIPTION"),
        ((s["name"], s.get("version"), s.get("description", "")[:60]) for s in found),
    )


@click.command()
@output_option
@click.pass_context
def nodes(ctx: click.Context, output: str) -> None:
    """List the fleet."""
    found = fetch(ctx, lambda c: c.nodes())
    if shown(output, found):
        return
    table(
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


@click.command()
@output_option
@click.pass_context
def whoami(ctx: click.Context, output: str) -> None:
    """Show who the token is."""
    me = fetch(ctx, lambda c: c.whoami())
    if shown(output, me):
        return
    who = me.get("subject") or me.get("name") or ""
    click.echo(f"{me.get('kind')} {who} org {me.get('org_id') or '-'}")
    click.echo(f"scopes {' '.join(me.get('scopes') or []) or '-'}")
