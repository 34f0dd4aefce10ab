"""How the ``runplane`` command reads its words (docs/cli.md): ``--url``, ``--token`` and
``-o`` before or after the verb (after it, they win), and an unknown verb or option as a
usage error (exit 2, before any request) naming the nearest verb or option."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from .api import Client

F = TypeVar("F", bound=Callable[..., Any])

FORMATS = click.Choice(["text", "json"])
URL_HELP = "server URL (RUNPLANE_URL); before or after the verb"
TOKEN_HELP = "bearer token (RUNPLANE_TOKEN); before or after the verb"


@dataclass
class Server:
    """Where the verbs go (``--url``, ``--token``) and how they print (``-o``), from the
    options before the verb, then from the same options after it (those win). The client is
    made on first use, so ``runplane serve`` and ``runplane agent`` (commands of this group
    too) never make one."""

    url: str | None
    token: str | None
    output: str | None = None
    client: Client | None = None


def root_server(ctx: click.Context) -> Server | None:
    """The group's settings; None while click only completes or shows help (no group run)."""
    server = ctx.find_root().obj
    return server if isinstance(server, Server) else None


def output_format(ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
    """A verb's ``-o``: its own, else the one before the verb, else text."""
    if value is not None:
        return value
    server = root_server(ctx)
    return server.output if server is not None and server.output else "text"


def output_option(fn: F) -> F:
    return click.option(
        "-o",
        "--output",
        type=FORMATS,
        callback=output_format,
        help="text (default) or json: only JSON on stdout",
    )(fn)


def _remember(field: str) -> Callable[[click.Context, click.Parameter, str | None], None]:
    """The callback of a verb's ``--url`` or ``--token``: given, it wins over the group's."""

    def callback(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
        server = root_server(ctx)
        if value is not None and server is not None:
            setattr(server, field, value)

    return callback


def add_server_options(group: click.Group) -> None:
    """Every command of ``group`` (and of its groups, and those groups) also takes ``--url``
    and ``--token`` after its name; ``-o`` is each verb's own (``output_option``)."""
    for command in group.commands.values():
        command.params += [
            click.Option(["--url"], help=URL_HELP, expose_value=False, callback=_remember("url")),
            click.Option(
                ["--token"], help=TOKEN_HELP, expose_value=False, callback=_remember("token")
            ),
        ]
        if isinstance(command, click.Group):
            add_server_options(command)


def _nearest(word: str, choices: Iterable[str]) -> str:
    """``" Did you mean 'x'?"`` for the choice nearest to ``word`` (``difflib``, as
    runplane/suggest.py measures it: the client imports nothing of runplane), else ``""``."""
    near = difflib.get_close_matches(word, list(choices), n=1)
    return f" Did you mean {near[0]!r}?" if near else ""


def no_such_option(exc: click.NoSuchOption) -> click.UsageError:
    """An unknown option as one usage error naming the command's nearest option, whatever
    click's version words it as."""
    ctx = exc.ctx
    names = [
        name
        for param in (ctx.command.get_params(ctx) if ctx is not None else [])
        for name in (*param.opts, *param.secondary_opts)
        if name.startswith("-")
    ]
    return click.UsageError(
        f"No such option {exc.option_name!r}.{_nearest(exc.option_name, names)}", ctx
    )


class Verbs(click.Group):
    """A group of verbs whose unknown verb is a usage error naming the nearest of its
    verbs (``serve`` and ``agent`` included)."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        if (
            not ctx.resilient_parsing
            and not name.startswith("-")
            and self.get_command(ctx, name) is None
        ):
            hint = _nearest(name, self.list_commands(ctx))
            raise click.UsageError(f"No such command {name!r}.{hint}", ctx)
        return super().resolve_command(ctx, args)
