"""Outputs: after a job's command ends, match its output globs in the working directory and
upload each file to ``/v1/artifacts/<job_id>/<relative path>`` on the server.

Glob syntax (matched per path segment, relative to the working directory; ``/work/`` and
``./`` prefixes are dropped): ``*`` any characters but ``/``, ``?`` one character,
``[abc]`` a class, ``**`` any number of directories (zero included). A pattern that
matches a directory takes every file under it (``out`` = ``out/**``). Dot files match like
any other. A symlink is uploaded (its target's bytes) only when it resolves to a regular
file inside the working directory; otherwise it is skipped and a system line says so.
When the job ran as a job user of the agent (``owner``), only files that user owns are
uploaded, checked again on the file as opened: the agent reads them with its own rights,
and a job must not get it to upload what the job itself could not read.

A file matched by several globs is uploaded once, labelled with the first glob's artifact.
A non-optional glob that matches nothing is reported in :attr:`Matched.missing`; the agent
fails a job that had succeeded with an error naming it.
"""

from __future__ import annotations

import functools
import os
import stat
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any
from urllib.parse import quote

import trio

from runplane.agent.protocol import OutputGlob
from runplane.artifacts.client import TransferError, artifact_url, upload
from runplane.artifacts.keys import BadKey, check_key

#: Most files one job uploads; more matches fail the job (a glob like ``**`` on a big tree).
MAX_OUTPUT_FILES = 10_000
_MAGIC = frozenset("*?[")

Note = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class OutputFile:
    artifact: str
    rel: str  # path relative to the workdir, '/'-separated
    path: Path  # what to read (a symlink's target for a symlink)
    size: int


@dataclass(slots=True)
class Matched:
    files: list[OutputFile] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # non-optional globs that matched nothing
    notes: list[str] = field(default_factory=list)  # system lines (skipped files)
    error: str | None = None  # too many files


def normalize_glob(glob: str) -> str:
    glob = glob.strip()
    if glob.startswith("/work/"):
        glob = glob[len("/work/") :]
    while glob.startswith("./"):
        glob = glob[2:]
    return glob.rstrip("/")


def _segments(glob: str) -> tuple[str, ...]:
    parts = tuple(p for p in glob.split("/") if p not in ("", "."))
    if glob.startswith("/") or ".." in parts:
        raise ValueError(f"output glob {glob!r} must stay inside the working directory")
    return parts


def _match(pattern: tuple[str, ...], path: tuple[str, ...]) -> bool:
    @functools.cache
    def go(i: int, j: int) -> bool:
        if i == len(pattern):
            return j == len(path)
        head = pattern[i]
        if head == "**":
            return any(go(i + 1, k) for k in range(j, len(path) + 1))
        return j < len(path) and fnmatchcase(path[j], head) and go(i + 1, j + 1)

    return go(0, 0)


def _base(pattern: tuple[str, ...]) -> tuple[str, ...]:
    """The literal directory a pattern starts in (walking only that is enough)."""
    base: list[str] = []
    for part in pattern[:-1]:
        if _MAGIC & set(part) or part == "**":
            break
        base.append(part)
    return tuple(base)


def _regular_inside(root: Path, path: str) -> tuple[Path, int, int] | None:
    """(what to read, size, owner uid) for a regular file or a symlink resolving to one
    inside root."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISREG(st.st_mode):
        return Path(path), st.st_size, st.st_uid
    if not stat.S_ISLNK(st.st_mode):
        return None
    real = Path(os.path.realpath(path))
    if root not in real.parents:
        return None
    try:
        st = os.stat(real)
    except OSError:
        return None
    return (real, st.st_size, st.st_uid) if stat.S_ISREG(st.st_mode) else None


def match_outputs(
    workdir: Path, outputs: Sequence[OutputGlob], owner: int | None = None
) -> Matched:
    """Match every output glob in ``workdir`` (blocking: run it in a thread); with
    ``owner``, files of other users are skipped."""
    root = Path(os.path.realpath(workdir))
    result = Matched()
    seen: set[str] = set()
    for output in outputs:
        try:
            pattern = _segments(normalize_glob(output.glob))
        except ValueError as exc:
            result.notes.append(str(exc))
            if not output.optional:
                result.missing.append(output.glob)
            continue
        if not pattern:
            pattern = ("**",)
        matched = 0
        base = root.joinpath(*_base(pattern))
        if not os.path.isdir(base) or os.path.islink(base):
            candidates: list[tuple[str, str]] = []
        else:
            candidates = list(_walk(root, base))
        for rel, full in candidates:
            parts = tuple(rel.split("/"))
            hit = _match(pattern, parts) or any(
                _match(pattern, parts[:k]) for k in range(1, len(parts))
            )
            if not hit:
                continue
            found = _regular_inside(root, full)
            if found is None:
                result.notes.append(f"output {rel} skipped: not a regular file inside /work")
                continue
            if owner is not None and found[2] != owner:
                result.notes.append(f"output {rel} skipped: not a file of the job's user")
                continue
            matched += 1
            if rel in seen:
                continue
            try:
                check_key(rel)
            except BadKey as exc:
                result.notes.append(f"output {rel!r} skipped: {exc}")
                continue
            seen.add(rel)
            if len(result.files) >= MAX_OUTPUT_FILES:
                result.error = (
                    f"output globs matched more than {MAX_OUTPUT_FILES} files "
                    f"(at {output.glob!r}); narrow them"
                )
                return result
            result.files.append(OutputFile(output.artifact, rel, found[0], found[1]))
        if matched == 0 and not output.optional:
            result.missing.append(output.glob)
    return result


def _walk(root: Path, base: Path) -> list[tuple[str, str]]:
    """(relative path, full path) of every non-directory under ``base``, not following
    symlinked directories, sorted."""
    out: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        names = sorted(
            filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        )
        for name in names:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/")
            out.append((rel, os.path.join(dirpath, name)))
    return out


def artifact_ref(job_id: str, rel: str) -> str:
    return "/v1/artifacts/" + quote(f"{job_id}/{rel}", safe="/")


@dataclass(slots=True)
class Uploaded:
    refs: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    bytes: int = 0
    seconds: float = 0.0


def _open_owned(path: Path, owner: int) -> int:
    """Open ``path`` (no symlink at its end) as a regular file of ``owner``; the fd."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != owner:
        os.close(fd)
        raise TransferError("it changed after it was matched: not a file of the job's user")
    return fd


async def upload_outputs(
    server_url: str,
    job_id: str,
    files: Sequence[OutputFile],
    *,
    note: Note | None = None,
    owner: int | None = None,
) -> Uploaded:
    """Upload ``files`` one by one; every file is tried, the first failure is reported.
    With ``owner``, each file is opened once and read through that descriptor only if it
    is still a regular file of that user."""
    result = Uploaded()
    started = time.monotonic()
    for item in files:
        url = artifact_url(server_url, f"{job_id}/{item.rel}")
        fd: int | None = None
        try:
            path = item.path
            if owner is not None:
                fd = await trio.to_thread.run_sync(_open_owned, item.path, owner)
                path = Path(f"/proc/self/fd/{fd}")
            done = await upload(url, path)
        except (TransferError, OSError) as exc:
            message = f"uploading output {item.rel} failed: {exc}"
            if note is not None:
                await note(message)
            result.error = result.error or message
            continue
        finally:
            if fd is not None:
                os.close(fd)
        result.bytes += done.size
        result.refs.append(
            {
                "artifact": item.artifact,
                "ref": artifact_ref(job_id, item.rel),
                "sha256": done.sha256,
                "size": done.size,
            }
        )
    result.seconds = time.monotonic() - started
    return result


async def collect_outputs(
    workdir: Path,
    outputs: Sequence[OutputGlob],
    server_url: str,
    job_id: str,
    *,
    note: Note | None = None,
    owner: int | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """Match and upload; returns the ArtifactRefs and the error that should fail a job that
    had succeeded (a missing non-optional glob, too many files, a failed upload), if any.
    ``owner``: the uid the job ran as, whose files alone are uploaded."""
    if not outputs:
        return [], None
    matched = await trio.to_thread.run_sync(match_outputs, workdir, list(outputs), owner)
    if note is not None:
        for line in matched.notes:
            await note(line)
    if matched.error is not None:
        return [], matched.error
    uploaded = await upload_outputs(server_url, job_id, matched.files, note=note, owner=owner)
    if note is not None and matched.files:
        mb = uploaded.bytes / 1e6
        await note(
            f"uploaded {len(uploaded.refs)} output file{'s' * (len(uploaded.refs) != 1)} "
            f"({mb:.1f} MB) in {uploaded.seconds:.2f} s"
        )
    error = uploaded.error
    if matched.missing:
        globs = ", ".join(repr(g) for g in matched.missing)
        plural = "s" if len(matched.missing) > 1 else ""
        error = f"output glob{plural} {globs} matched no files"
    return uploaded.refs, error
