"""What every verb of the ``runplane`` command shares (docs/cli.md): the context's client,
a refusal printed with its next step, ``-o json`` output, aligned tables, ``KEY=VALUE``
pairs, config values, input files and the exit status of a followed job."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import yaml
from rich.console import Console
from rich.markup import escape

from .api import ApiError, Client, JSONObject
from .options import Server

R = TypeVar("R")
#: stderr; a message is never wrapped mid-phrase (a non-TTY console would cut at 80 columns)
err = Console(stderr=True, highlight=False, soft_wrap=True)

#: Exit statuses of ``--follow`` (and of a refused or unreachable server).
EXIT_TIMEOUT, EXIT_CANCELLED, EXIT_API = 124, 130, 3


def client_of(ctx: click.Context) -> Client:
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


def token_sent() -> bool:
    """Whether the command's client sends a token (any command of the group)."""
    ctx = click.get_current_context(silent=True)
    server = ctx.find_root().obj if ctx is not None else None
    client = getattr(server, "client", None)
    return isinstance(client, Client) and client.config.token is not None


def fail(error: ApiError, url: str) -> NoReturn:
    """Print the problem and the next step; exit 3 (a 401 included: with a token sent,
    the advice says the token was refused)."""
    hint = REFUSED_TOKEN_HINT if error.status == 401 and token_sent() else error.hint(url)
    refuse(error.detail, hint)


def refuse(detail: str, hint: str = "") -> NoReturn:
    """``error: detail`` and ``next: hint`` on stderr (each one line, however long: never
    wrapped, never read as markup); exit 3."""
    err.print(f"[red]error:[/red] {escape(detail)}")
    if hint:
        err.print(f"[dim]next:[/dim] {escape(hint)}")
    sys.exit(EXIT_API)


def fetch(ctx: click.Context, call: Callable[[Client], R]) -> R:
    """``call`` on the context's client; a refusal prints its detail and next step and
    exits 3."""
    client = client_of(ctx)
    try:
        return call(client)
    except ApiError as exc:
        fail(exc, client.url)


def shown(output: str, value: Any) -> bool:
    """With ``-o json``, print ``value`` as the only stdout and say so."""
    if output == "json":
        print_json(value)
    return output == "json"


def print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True))


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Aligned columns on stdout, nothing cut (ids stay whole for copy and paste)."""
    cells = [list(columns)] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


#: The form each option of pairs takes, as its help's metavar names it.
PAIR_FORMS = {"--input": "PATH=REF", "--output": "ARTIFACT=GLOB", "--sweep": "KEY=V1,V2,..."}


def list_table(
    ctx: click.Context,
    output: str,
    call: Callable[[Client], list[JSONObject]],
    columns: Sequence[str],
    row: Callable[[JSONObject], Sequence[Any]],
) -> None:
    """A list verb's output: ``call``'s items as JSON (``-o json``) or a table of
    ``row(item)`` under ``columns``."""
    found = fetch(ctx, call)
    if shown(output, found):
        return
    table(columns, (row(item) for item in found))


def pairs(values: Iterable[str], what: str) -> dict[str, str]:
    """``KEY=VALUE`` items of the option ``what`` as a dict; a usage error naming the
    option's own form (``--output``: ARTIFACT=GLOB) for one without ``=``."""
    found = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            form = PAIR_FORMS.get(what, "KEY=VALUE")
            raise click.BadParameter(f"{item!r} is not {form}", param_hint=what)
        found[key] = value
    return found


def config_value(text: str) -> Any:
    """``3`` is a number, ``true`` a bool, ``"x"`` or ``x`` a string (JSON when it parses)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def mount_type(ref: str) -> str:
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


def load_file(path: Path) -> JSONObject:
    text = path.read_text()
    try:
        value = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise click.BadParameter(f"{path} is not valid JSON or YAML: {exc}") from None
    if not isinstance(value, dict):
        raise click.BadParameter(f"{path} must hold an object (a mapping)")
    return value
