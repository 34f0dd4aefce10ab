"""The ``runplane share``, ``unshare``, ``embed`` and ``artifacts`` verbs (docs/cli.md): a
job's read-only links, and its output files listed, downloaded one by one (streamed to a
file, checked against its sha256) or all at once as a zip."""

from __future__ import annotations

import difflib
import hashlib
from pathlib import Path
from urllib.parse import unquote

import click
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

from .api import ApiError, Client, JSONObject
from .common import client_of, err, fail, fetch, print_json, refuse, shown, table
from .options import Verbs, output_option

#: A download at least this big shows its progress on stderr.
PROGRESS_FROM_BYTES = 8 << 20
EMBED_CATEGORIES = click.Choice(["logs", "metrics", "streams", "artifacts"])


@click.command()
@click.argument("job_id")
@click.option("--ttl-hours", type=click.IntRange(1, 720), help="hours the link works (default 720)")
@output_option
@click.pass_context
def share(ctx: click.Context, job_id: str, ttl_hours: int | None, output: str) -> None:
    """Make a read-only link to JOB's run view; prints its URL (`unshare` revokes it)."""
    made = fetch(ctx, lambda c: c.share(job_id, ttl_hours=ttl_hours))
    if shown(output, made):
        return
    click.echo(made["url"])
    err.print(f"read-only, for {job_id} only, until {made.get('expires_at')}")


@click.command()
@click.argument("job_id")
@output_option
@click.pass_context
def unshare(ctx: click.Context, job_id: str, output: str) -> None:
    """Revoke every share link of JOB."""
    done = fetch(ctx, lambda c: c.unshare(job_id))
    if not shown(output, done):
        click.echo(f"{done['job_id']}: {done['revoked']} share link(s) revoked")


@click.command()
@click.argument("job_id")
@click.option("--ttl-hours", type=click.IntRange(1, 720), help="hours the embed works (default 24)")
@click.option(
    "--allow",
    multiple=True,
    type=EMBED_CATEGORIES,
    help="what the page may show (repeat it; none: all)",
)
@click.option("--title", help="the embed's title (branding)")
@output_option
@click.pass_context
def embed(
    ctx: click.Context,
    job_id: str,
    ttl_hours: int | None,
    allow: tuple[str, ...],
    title: str | None,
    output: str,
) -> None:
    """Make an embed link for JOB (a page to put in an iframe); prints its URL."""
    body: JSONObject = {"allow": list(allow)}
    if ttl_hours is not None:
        body["ttl_hours"] = ttl_hours
    if title:
        body["branding"] = {"title": title}
    made = fetch(ctx, lambda c: c.embed(job_id, body))
    if shown(output, made):
        return
    click.echo(made["url"])
    err.print(f"shows {', '.join(allow) or 'everything'} of {job_id}, until {made['expires_at']}")


# -- artifacts --------------------------------------------------------------------------------


@click.group(cls=Verbs)
def artifacts() -> None:
    """A job's output files: list, download one, or all as a zip."""


def file_path(job_id: str, entry: JSONObject) -> str:
    """The file's path under the job (``out/model.pt``), from its ``ref``."""
    ref = unquote(str(entry.get("ref", "")))
    return ref.removeprefix(f"/v1/artifacts/{job_id}/")


@artifacts.command(name="ls")
@click.argument("job_id")
@output_option
@click.pass_context
def artifacts_ls(ctx: click.Context, job_id: str, output: str) -> None:
    """List JOB's files: artifact, path, size, sha256 (`-o json`: with their refs)."""
    found = fetch(ctx, lambda c: c.artifacts(job_id))
    if shown(output, found):
        return
    if not found:
        err.print(f"{job_id} has no artifacts (a job keeps files with `submit --output`)")
        return
    table(
        ("ARTIFACT", "PATH", "SIZE", "SHA256"),
        ((a.get("artifact"), file_path(job_id, a), a.get("size"), a.get("sha256")) for a in found),
    )


def _pick(job_id: str, found: list[JSONObject], name: str) -> JSONObject:
    """The file NAME names: its path, else an artifact of one file; a usage error naming
    the nearest otherwise."""
    for entry in found:
        if file_path(job_id, entry) == name:
            return entry
    labelled = [e for e in found if e.get("artifact") == name]
    if len(labelled) == 1:
        return labelled[0]
    paths = [file_path(job_id, e) for e in found]
    if labelled:
        many = ", ".join(file_path(job_id, e) for e in labelled)
        refuse(
            f"artifact {name!r} of {job_id} has {len(labelled)} files: {many}",
            f"name one of them, or get them all with `runplane artifacts zip {job_id}`",
        )
    near = difflib.get_close_matches(name, paths + [str(e.get("artifact")) for e in found], 1)
    refuse(
        f"{job_id} has no artifact or file {name!r}"
        + (f"; did you mean {near[0]!r}?" if near else ""),
        f"`runplane artifacts ls {job_id}` lists its files",
    )


@artifacts.command(name="get")
@click.argument("job_id")
@click.argument("name")
@click.option(
    "-O",
    "dest",
    type=click.Path(path_type=Path),
    help="where to write it (a file, or a directory); default: its name, here",
)
@output_option
@click.pass_context
def artifacts_get(
    ctx: click.Context, job_id: str, name: str, dest: Path | None, output: str
) -> None:
    """Download one file of JOB: NAME is its path (as `artifacts ls` shows it) or an
    artifact of one file. Streamed to disk and checked against its sha256."""
    client = client_of(ctx)
    entry = _pick(job_id, fetch(ctx, lambda c: c.artifacts(job_id)), name)
    path = file_path(job_id, entry)
    target = dest or Path(Path(path).name)
    if target.is_dir():
        target = target / Path(path).name
    size, digest = _download(client, str(entry["ref"]), target, entry.get("size"))
    if entry.get("sha256") and digest != entry["sha256"]:
        target.unlink(missing_ok=True)
        refuse(
            f"{path}: the bytes received hash to sha256 {digest}, not the recorded "
            f"{entry['sha256']} (nothing kept)",
            "try again; if it happens again, the stored file is damaged",
        )
    if output == "json":
        print_json(
            {"job_id": job_id, "path": path, "file": str(target), "size": size, "sha256": digest}
        )
        return
    click.echo(str(target))
    err.print(f"{path}: {size} bytes, sha256 checked")


@artifacts.command(name="zip")
@click.argument("job_id")
@click.option(
    "-O", "dest", type=click.Path(dir_okay=False, path_type=Path), help="default: JOB.zip here"
)
@output_option
@click.pass_context
def artifacts_zip(ctx: click.Context, job_id: str, dest: Path | None, output: str) -> None:
    """Download every file of JOB as one zip (paths as `artifacts ls` shows them)."""
    client = client_of(ctx)
    target = dest or Path(f"{job_id}.zip")
    size, digest = _download(client, f"/v1/artifacts-zip/{job_id}", target, None)
    if output == "json":
        print_json({"job_id": job_id, "file": str(target), "size": size, "sha256": digest})
        return
    click.echo(str(target))
    err.print(f"{job_id}: {size} bytes")


def _download(client: Client, ref: str, target: Path, size: object) -> tuple[int, str]:
    """Stream ``ref`` into ``target``: (bytes, sha256); progress on stderr for a big file
    or a zip; a refusal exits 3 with its next step."""
    digest = hashlib.sha256()
    big = isinstance(size, int) and size >= PROGRESS_FROM_BYTES
    if big and not err.is_terminal:  # no bar to redraw: one line says what is coming
        err.print(f"downloading {size} bytes to {target}")
    columns = (BarColumn(), DownloadColumn(), TransferSpeedColumn())
    # a bar on a terminal, for a big file or a zip (whose size is known only at the end)
    shown = big or size is None
    with Progress(*columns, console=err, transient=True, disable=not shown) as bar:
        task = bar.add_task("download", total=size if isinstance(size, int) else None)
        seen = 0

        def step(chunk: bytes) -> None:
            nonlocal seen
            digest.update(chunk)
            seen += len(chunk)
            bar.update(task, completed=seen)

        try:
            written = client.download(ref, target, step)
        except ApiError as exc:
            fail(exc, client.url)
    return written, digest.hexdigest()


#: The verbs runplane/client/cli.py registers.
VERBS = (share, unshare, embed, artifacts)
