"""The ``runplane stacks [show NAME]``, ``nodes`` and ``whoami`` verbs (docs/cli.md)."""

from __future__ import annotations

import json

import click

from .api import JSONObject
from .common import fetch, list_table, shown, table
from .options import Verbs, output_option


@click.group(cls=Verbs, invoke_without_command=True)
@output_option
@click.pass_context
def stacks(ctx: click.Context, output: str) -> None:
    """List the stack catalog (each stack's config keys; descriptions whole); `stacks show
    NAME` prints one stack's config fields, metrics and examples."""
    if ctx.invoked_subcommand is not None:
        return
    list_table(
        ctx,
        output,
        lambda c: c.stacks(),
        ("STACK", "VERSION", "MODES", "CONFIG", "DESCRIPTION"),
        lambda s: (
            s["name"],
            s.get("version"),
            ",".join(s.get("modes") or []),
            ",".join(c["key"] for c in s.get("config") or []) or "-",
            s.get("description", "") + (" (unavailable)" if s.get("unavailable") else ""),
        ),
    )


@stacks.command(name="show")
@click.argument("name")
@output_option
@click.pass_context
def stacks_show(ctx: click.Context, name: str, output: str) -> None:
    """Show one stack: its description, modes, requirements, every config field (key,
    type, default, range or values), its metrics and examples (`-o json`: the catalog
    entry)."""
    stack = fetch(ctx, lambda c: c.stack(name))
    if shown(output, stack):
        return
    title = stack.get("display_name") or ""
    click.echo(f"{stack['name']} {stack.get('version', '')}" + (f" ({title})" if title else ""))
    click.echo(stack.get("description", ""))
    click.echo()
    click.echo(f"{'modes':12} {', '.join(stack.get('modes') or []) or '-'}")
    click.echo(f"{'requires':12} {_requires(stack.get('requires') or {})}")
    if stack.get("categories"):
        click.echo(f"{'categories':12} {', '.join(stack['categories'])}")
    if stack.get("unavailable"):
        click.echo(f"{'unavailable':12} yes: this server cannot run it")
    click.echo()
    _config_fields(stack.get("config") or [])
    metrics = stack.get("metrics") or []
    if metrics:
        click.echo()
        table(
            ("METRIC", "BEST"),
            (
                (m["key"], "higher is better" if m.get("higher_is_better") else "lower is better")
                for m in metrics
            ),
        )
    for example in stack.get("examples") or []:
        click.echo()
        _example(example)


def _requires(requires: JSONObject) -> str:
    cpu = (requires.get("cpu") or {}).get("min_cores") or 0
    ram = (requires.get("ram") or {}).get("min_gb") or 0
    gpu = requires.get("gpu") or {}
    if gpu.get("required"):
        vram = gpu.get("min_vram_gb") or 0
        gpus = "a GPU" + (f" with at least {vram} GB" if vram else "")
    else:
        gpus = "no GPU"
    return f"at least {cpu} CPU cores, {ram} GB RAM, {gpus}"


def _config_fields(fields: list[JSONObject]) -> None:
    if not fields:
        click.echo("config: none (the stack takes no --config keys)")
        return
    click.echo("config (submit --config KEY=VALUE):")
    table(
        ("KEY", "TYPE", "DEFAULT", "ACCEPTS", "DESCRIPTION"),
        (
            (
                f["key"],
                f.get("type"),
                _default(f.get("default")),
                _accepts(f),
                f.get("description", ""),
            )
            for f in fields
        ),
    )


def _default(value: object) -> str:
    """A string as it is (``main.py``), anything else as JSON (``true``, ``0.1``)."""
    return value if isinstance(value, str) and value else json.dumps(value)


def _accepts(field: JSONObject) -> str:
    """``1 to 500``, ``>= 0``, ``pd|random`` or ``-``."""
    if field.get("values"):
        return "|".join(str(v) for v in field["values"])
    low, high = field.get("min"), field.get("max")
    if low is not None and high is not None:
        return f"{low} to {high}"
    if low is not None:
        return f">= {low}"
    if high is not None:
        return f"<= {high}"
    return "-"


def _example(example: JSONObject) -> None:
    about = example.get("description") or ""
    click.echo(f"example {example.get('name', '')}" + (f": {about}" if about else ""))
    for key in ("setup", "run"):
        if example.get(key):
            click.echo(f"  {key}: {example[key]}")
    code = example.get("code") or ""
    if code:
        click.echo("  code:")
        for line in code.rstrip("\n").splitlines():
            click.echo(f"    {line}")


@click.command()
@output_option
@click.pass_context
def nodes(ctx: click.Context, output: str) -> None:
    """List the fleet."""
    list_table(
        ctx,
        output,
        lambda c: c.nodes(),
        ("NODE", "NAME", "STATUS", "CPU", "RAM GB", "GPUS", "JOBS"),
        lambda n: (
            n["id"],
            n.get("name"),
            n.get("status"),
            f"{n.get('used_cpu', 0)}/{n.get('cpu_cores', 0)}",
            f"{n.get('used_ram', 0)}/{n.get('ram_gb', 0)}",
            f"{n.get('used_gpu', 0)}/{n.get('gpus', 0)}",
            len(n.get("running_jobs") or []),
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
