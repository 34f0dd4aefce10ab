"""Pulling an image by digest with skopeo into an OCI layout (docs/containers.md, "Pulling
and the image cache").

A pull copies the image (``skopeo copy docker://<source> oci:<layout>:img``; skopeo
checks the manifest and each blob against their digests as it copies) while it reads the
manifest itself (``skopeo inspect --raw``), checks that its sha256 is the digest asked for
and lets the cache make room for its layers (or refuse: the copy is then stopped). The
two run at once so a pull costs about what ``skopeo copy`` alone does (``bench
containers``). The copy's progress becomes the job's system log lines. Once both are done
the layout must hold the manifest read (for a multi-platform index: the node's
platform's manifest, by its digest in the index). A credential reaches skopeo as an
auth file in a memfd (``--authfile /proc/self/fd/N``): never on disk, in argv or in a
log. Each step is tried :data:`PULL_TRIES` times (``backoff.py`` delays) before the
attempt fails with the registry's reason; a digest mismatch is refused at once.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TypeVar

import trio

from runplane.agent.backoff import Backoff
from runplane.agent.images.errors import CacheFull, DigestMismatch, ImageError, PullFailed
from runplane.agent.images.layout import (
    LAYOUT_TAG,
    LayoutImage,
    Manifest,
    check_layout,
    parse_manifest,
    platform_manifest,
    read_layout,
)
from runplane.agent.protocol import ImageOrder

SKOPEO = "skopeo"
#: each step of a pull (manifest, copy) is tried this many times, Backoff(1 s, 4 s) apart
PULL_TRIES = 3
RETRY_MIN_SEC = 1.0
RETRY_MAX_SEC = 4.0
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
_BLOB_RE = re.compile(r"Copying blob (sha256:[0-9a-f]{64})")
_MSG_RE = re.compile(r'msg="((?:[^"\\]|\\.)*)"')
_STDERR_KEEP = 8192

Note = Callable[[str], Awaitable[None]]
T = TypeVar("T")


def order_digest(order: ImageOrder) -> str:
    """The digest an order pulls (``sha256:<hex>``): its source's, which must be its ref's."""
    digest = order.source.rpartition("@")[2]
    if not DIGEST_RE.fullmatch(digest) or order.ref.rpartition("@")[2] != digest:
        raise ImageError(
            f"image {order.ref}: not a reference by digest ({order.source}); images are "
            "pulled as name@sha256:<hex>"
        )
    return digest


def short(digest: str) -> str:
    return f"{digest[:19]}…"


def megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


@contextmanager
def auth_file(order: ImageOrder) -> Iterator[int | None]:
    """The order's credential as a containers auth file in a memfd (None: anonymous)."""
    if order.auth is None:
        yield None
        return
    pair = f"{order.auth.username}:{order.auth.password}".encode()
    registry = order.source.split("/", 1)[0]
    doc = {"auths": {registry: {"auth": base64.b64encode(pair).decode()}}}
    fd = os.memfd_create("runplane-registry-auth", os.MFD_CLOEXEC)
    try:
        os.write(fd, json.dumps(doc).encode())
        yield fd
    finally:
        os.close(fd)


def registry_reason(stderr: str, order: ImageOrder) -> str:
    """What the registry (or the network) said, out of skopeo's last error message."""
    messages = _MSG_RE.findall(stderr)
    text = messages[-1].replace('\\"', '"') if messages else stderr.strip()
    text = text.splitlines()[-1] if text.strip() else "skopeo failed without a message"
    said = re.fullmatch(r".* in \S+: (.+)", text)
    if said:
        text = said.group(1)
    else:
        text = re.sub(r"^(initializing source|Error parsing image name) \S+: ", "", text)
    if order.auth is not None and order.auth.password:
        text = text.replace(order.auth.password, "***")
    return text[:500]


def _failure(stderr: str, order: ImageOrder) -> ImageError:
    reason = registry_reason(stderr, order)
    low = stderr.lower()
    if "digest did not match" in low or "digest mismatch" in low:
        return DigestMismatch(f"layer/manifest digest mismatch: refused ({reason})")
    if "no space left on device" in low:
        return CacheFull(f"image cache full: no space left on the disk while pulling ({reason})")
    return PullFailed(reason)


async def _skopeo(
    args: list[str], fd: int | None, on_line: Callable[[str], Awaitable[None]] | None = None
) -> tuple[int, bytes, str]:
    """Run skopeo, each stdout line to ``on_line`` (None: its stdout returned); its exit
    status, stdout and stderr's tail. A cancel kills it (trio.run_process)."""
    err = bytearray()
    out = bytearray()
    async with trio.open_nursery() as nursery:
        run = partial(
            trio.run_process,
            [SKOPEO, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            check=False,
            pass_fds=() if fd is None else (fd,),
        )
        proc: trio.Process = await nursery.start(run)
        assert proc.stdout is not None and proc.stderr is not None

        async def read_stderr(stream: trio.abc.ReceiveStream) -> None:
            async for chunk in stream:
                err.extend(chunk)
                del err[:-_STDERR_KEEP]

        nursery.start_soon(read_stderr, proc.stderr)
        pending = b""
        async for chunk in proc.stdout:
            if on_line is None:
                out.extend(chunk)
                continue
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                await on_line(line.decode(errors="replace"))
    assert proc.returncode is not None
    return proc.returncode, bytes(out), err.decode(errors="replace")


def _auth_args(flag: str, fd: int | None) -> list[str]:
    return [] if fd is None else [flag, f"/proc/self/fd/{fd}"]


async def fetch_manifest(order: ImageOrder, fd: int | None, digest: str) -> Manifest:
    """The manifest ``digest`` names, its sha256 checked."""
    args = ["inspect", "--raw", *_auth_args("--authfile", fd)]
    if order.insecure:
        args.append("--tls-verify=false")
    code, raw, err = await _skopeo([*args, f"docker://{order.source}"], fd)
    if code != 0:
        raise _failure(err, order)
    got = "sha256:" + hashlib.sha256(raw).hexdigest()
    if got != digest:
        raise DigestMismatch(
            f"layer/manifest digest mismatch: refused (the manifest served is {got}, not {digest})"
        )
    return parse_manifest(raw, f"manifest {digest}")


async def copy(
    order: ImageOrder,
    fd: int | None,
    layout: Path,
    known: list[tuple[str, Manifest]],
    read: trio.Event,
    note: Note,
) -> None:
    """Copy the image ``order.source`` names into ``layout``, a note per layer as skopeo
    starts it, with its place and size (from the manifest, ``known[0]``, once ``read``)."""

    async def progress(line: str) -> None:
        blob = _BLOB_RE.match(line)
        if blob is None:
            return
        await read.wait()
        digest = blob.group(1)
        layers = known[0][1].layers
        sizes = {d: (i, size) for i, (d, size) in enumerate(layers, 1)}
        if digest in sizes:
            i, size = sizes[digest]
            await note(f"layer {i}/{len(sizes)} {short(digest)} {megabytes(size)}")
        else:
            await note(f"layer {short(digest)}")

    await trio.to_thread.run_sync(_remove, layout)  # what a failed try left
    args = ["copy", *_auth_args("--src-authfile", fd)]
    if order.insecure:
        args.append("--src-tls-verify=false")
    code, _, err = await _skopeo(
        [*args, f"docker://{order.source}", f"oci:{layout}:{LAYOUT_TAG}"], fd, progress
    )
    if code != 0:
        raise _failure(err, order)


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


async def _tried(ref: str, step: Callable[[], Awaitable[T]], note: Note) -> T:
    """``step``, tried :data:`PULL_TRIES` times while the registry or network refuses it."""
    backoff = Backoff(RETRY_MIN_SEC, RETRY_MAX_SEC)
    for attempt in range(1, PULL_TRIES + 1):
        try:
            return await step()
        except PullFailed as exc:
            if attempt == PULL_TRIES:
                raise PullFailed(f"pulling {ref} failed after {PULL_TRIES} tries: {exc}") from None
            delay = backoff.next_delay()
            await note(
                f"pulling {ref} failed ({exc}); try {attempt + 1} of {PULL_TRIES} in {delay:.1f} s"
            )
            await trio.sleep(delay)
    raise AssertionError("unreachable")


async def pull(
    order: ImageOrder,
    layout: Path,
    note: Note,
    room: Callable[[Manifest], Awaitable[None]],
) -> LayoutImage:
    """Copy the image ``order`` names into the OCI layout ``layout``, checked; ``room``
    is awaited with its manifest while the copy runs (the cache makes room, or refuses:
    the copy is stopped)."""
    digest = order_digest(order)
    await note(f"pulling {order.ref} from {order.source}")
    started = trio.current_time()
    #: the image manifest and its digest, once read (the copy's progress waits for it)
    known: list[tuple[str, Manifest]] = []
    read = trio.Event()
    with auth_file(order) as fd:

        async def manifest_and_room() -> None:
            known.append(await _image_manifest(order, fd, digest, note))
            read.set()
            await room(known[0][1])

        async def first_copy() -> bool:
            """One try alongside the manifest's: a failure is left to the manifest's
            tries to explain (the registry's reason), then the copy is tried again."""
            try:
                await copy(order, fd, layout, known, read, note)
            except PullFailed:
                return False
            return True

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(manifest_and_room)
                copied = await first_copy()
        except BaseExceptionGroup as group:
            raise _first_refusal(group) from None
        if not copied:
            await _tried(order.ref, lambda: copy(order, fd, layout, known, read, note), note)
    want, manifest = known[0]
    image = await trio.to_thread.run_sync(read_layout, layout)
    check_layout(image, manifest, want)
    layers = image.manifest.layers
    await note(
        f"pulled {order.ref}: {len(layers)} layer{'' if len(layers) == 1 else 's'}, "
        f"{megabytes(sum(s for _, s in layers))} in {trio.current_time() - started:.2f} s"
    )
    return image


def _first_refusal(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """What failed a pull whose two halves ran at once: its ImageError (a refusal of the
    manifest wins over the copy's failure), else the group itself."""
    errors = [e for e in group.exceptions if isinstance(e, ImageError)]
    if not errors:
        return group
    refusals = [e for e in errors if not isinstance(e, PullFailed)]
    return (refusals or errors)[0]


async def _image_manifest(
    order: ImageOrder, fd: int | None, digest: str, note: Note
) -> tuple[str, Manifest]:
    """The image manifest ``order`` names, its sha256 checked, and its digest: for a
    multi-platform index, the node's platform's manifest (by its digest in the index)."""
    manifest = await _tried(order.ref, lambda: fetch_manifest(order, fd, digest), note)
    if manifest.index:
        digest = platform_manifest(manifest, order.ref)
        name = order.source.rpartition("@")[0]
        one = order.model_copy(update={"source": f"{name}@{digest}"})
        manifest = await _tried(order.ref, lambda: fetch_manifest(one, fd, digest), note)
    return digest, manifest
