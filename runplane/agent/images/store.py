"""The node's image cache (docs/containers.md, "Pulling and the image cache"): each digest
pulled and unpacked once under ``<data dir>/images``, pinned while a job uses it,
evicted least-recently-used under the limit (``--image-cache-gb``).

On disk (the agent's own, 0700)::

    images/sha256/<hex>/rootfs/       the unpacked root filesystem
    images/sha256/<hex>/config.json   the image config blob
    images/sha256/<hex>/entry.json    {digest, ref, size}: written last
    images/lru.json                   the digests, most recently used first
    images/tmp/                       pulls in progress (swept at start)
    images/trash/                     evicted entries being removed (swept at start)

A pull happens in ``tmp/<hex>.<n>/``: the OCI layout skopeo writes, then the rootfs umoci
unpacks from it; the layout is removed once unpacked (an entry is its rootfs and config:
its size is the rootfs's) and the directory is renamed to ``sha256/<hex>`` only then:
nothing half-pulled or half-unpacked is ever used, and a leftover of a crash is swept.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import trio

from runplane.agent.execspec import ImageConfig, Rootfs
from runplane.agent.images.errors import CacheFull, ImageError
from runplane.agent.images.layout import Manifest, check_platform, image_config
from runplane.agent.images.pull import megabytes, order_digest, pull
from runplane.agent.images.unpack import tree_size, unpack
from runplane.agent.protocol import ImageFacts, ImageOrder

log = logging.getLogger("runplane.agent")

#: ``--image-cache-gb``'s default: unpacked images kept (GiB) besides those in use
DEFAULT_CACHE_GB = 20.0
ENTRY_FILE = "entry.json"
CONFIG_FILE = "config.json"
INDEX_FILE = "lru.json"
_HEX_RE = re.compile(r"[0-9a-f]{64}")

Note = Callable[[str], Awaitable[None]]


@dataclass(slots=True)
class Entry:
    """One unpacked image of the cache."""

    digest: str
    path: Path
    size: int
    config: ImageConfig

    def rootfs(self) -> Rootfs:
        return Rootfs(self.digest, self.path / "rootfs", self.config)


@dataclass(slots=True)
class _Flight:
    """A pull in progress: whoever else wants its digest waits for it (single flight)."""

    done: trio.Event = field(default_factory=trio.Event)
    error: ImageError | None = None


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _load_entry(path: Path) -> Entry | None:
    """The entry in ``path``, if it is a complete one."""
    if not _HEX_RE.fullmatch(path.name):
        return None
    try:
        meta = json.loads((path / ENTRY_FILE).read_text())
        config, _ = image_config((path / CONFIG_FILE).read_bytes())
        size = int(meta["size"])
    except (OSError, ValueError, KeyError, TypeError, ImageError):
        return None
    if meta.get("digest") != f"sha256:{path.name}" or not (path / "rootfs").is_dir():
        return None
    return Entry(f"sha256:{path.name}", path, size, config)


def _complete(tmp: Path, config: bytes, digest: str, ref: str) -> int:
    """Finish a pulled entry in ``tmp``: the layout removed, the config and then the entry
    file written; its size."""
    _rmtree(tmp / "layout")
    size = tree_size(tmp / "rootfs")
    (tmp / CONFIG_FILE).write_bytes(config)
    (tmp / ENTRY_FILE).write_text(json.dumps({"digest": digest, "ref": ref, "size": size}))
    return size


class ImageStore:
    """The cache in ``root`` (``<data dir>/images``), at most ``limit_bytes`` of unpacked
    images but those jobs are using. :meth:`open` it (blocking) before :meth:`use`."""

    def __init__(self, root: Path, limit_bytes: int) -> None:
        if limit_bytes <= 0:
            raise ValueError(f"the image cache limit must be more than 0 bytes, got {limit_bytes}")
        self.root = root
        self.limit_bytes = limit_bytes
        #: least recently used first (a dict keeps insertion order)
        self._entries: dict[str, Entry] = {}
        self._pins: Counter[str] = Counter()
        self._flights: dict[str, _Flight] = {}
        self._serial = 0
        #: pulls started since the store was made
        self.pulls = 0

    # -- the state

    def digests(self) -> list[str]:
        """The cached digests, most recently used first."""
        return list(reversed(self._entries))

    def used_bytes(self) -> int:
        return sum(e.size for e in self._entries.values())

    def facts(self) -> ImageFacts:
        """What the node reports of its cache (hello, heartbeats when it changed)."""
        free = max(0, self.limit_bytes - self.used_bytes())
        with suppress(OSError):
            free = min(free, shutil.disk_usage(self.root).free)
        return ImageFacts(digests=self.digests(), free_bytes=free, limit_bytes=self.limit_bytes)

    def pinned(self, digest: str) -> bool:
        return self._pins[digest] > 0

    # -- start

    def open(self) -> None:
        """Make the cache directory, sweep what a crash left, load the complete entries
        in their last order of use, and evict down to the limit (blocking)."""
        for sub in ("", "sha256", "tmp", "trash"):
            (self.root / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        swept = [*(self.root / "tmp").iterdir(), *(self.root / "trash").iterdir()]
        found: dict[str, Entry] = {}
        for path in (self.root / "sha256").iterdir():
            entry = _load_entry(path)
            if entry is None:
                swept.append(path)
            else:
                found[entry.digest] = entry
        for path in swept:
            _rmtree(path)
        if swept:
            log.info("image cache: swept what a crash left", extra={"paths": len(swept)})
        recent = [d for d in self._read_index() if d in found]
        unknown = sorted(set(found) - set(recent), key=lambda d: found[d].path.stat().st_mtime)
        self._entries = {d: found[d] for d in [*unknown, *reversed(recent)]}
        for entry in self._victims(0):
            del self._entries[entry.digest]
            _rmtree(entry.path)
        self._write_index()
        log.info(
            "image cache",
            extra={
                "root": str(self.root),
                "images": len(self._entries),
                "used_bytes": self.used_bytes(),
                "limit_bytes": self.limit_bytes,
            },
        )

    def _read_index(self) -> list[str]:
        try:
            digests = json.loads((self.root / INDEX_FILE).read_text())
        except (OSError, ValueError):
            return []
        return [str(d) for d in digests] if isinstance(digests, list) else []

    def _write_index(self) -> None:
        tmp = self.root / f".{INDEX_FILE}.tmp"
        try:
            tmp.write_text(json.dumps(self.digests()))
            os.replace(tmp, self.root / INDEX_FILE)
        except OSError as exc:
            log.warning("image cache: cannot write its index", extra={"error": str(exc)})

    # -- use

    @asynccontextmanager
    async def use(self, order: ImageOrder, note: Note) -> AsyncIterator[Rootfs]:
        """The image ``order`` names, unpacked (pulled first if it is not cached), pinned
        until the context ends and the most recently used. ImageError if it cannot be."""
        entry, cached = await self._ensure(order, note)  # pinned
        try:
            if cached:
                await note(f"image {order.ref} cached on this node")
            await self._evict(self._victims(0))
            yield entry.rootfs()
        finally:
            self._pins[entry.digest] -= 1
            if self._pins[entry.digest] <= 0:
                del self._pins[entry.digest]
            with trio.CancelScope(shield=True):
                await self._evict(self._victims(0))

    def _take(self, entry: Entry) -> Entry:
        """Pin ``entry`` and make it the most recently used."""
        self._pins[entry.digest] += 1
        self._entries[entry.digest] = self._entries.pop(entry.digest)
        self._write_index()
        return entry

    async def _ensure(self, order: ImageOrder, note: Note) -> tuple[Entry, bool]:
        """The entry, pinned (nothing awaited after the pin), and whether it was cached."""
        digest = order_digest(order)
        while True:
            entry = self._entries.get(digest)
            if entry is not None:
                return self._take(entry), True
            flight = self._flights.get(digest)
            if flight is None:
                break
            await note(f"waiting for the pull of {order.ref} another job started")
            await flight.done.wait()
            if flight.error is not None:
                raise type(flight.error)(str(flight.error))
        # A cancelled pull leaves no error: whoever waited for it pulls in its turn.
        flight = self._flights[digest] = _Flight()
        try:
            return await self._pull(order, digest, note), False
        except ImageError as exc:
            flight.error = exc
            raise
        finally:
            del self._flights[digest]
            flight.done.set()

    async def _pull(self, order: ImageOrder, digest: str, note: Note) -> Entry:
        """Pull and unpack into a temporary directory, then rename it into place; the
        temporary directory is removed in any case (cancel included: skopeo or umoci
        killed first)."""
        self.pulls += 1
        self._serial += 1
        tmp = self.root / "tmp" / f"{digest.partition(':')[2]}.{self._serial}"
        try:
            return await self._pull_into(tmp, order, digest, note)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_rmtree, tmp)

    async def _pull_into(self, tmp: Path, order: ImageOrder, digest: str, note: Note) -> Entry:
        try:
            await trio.to_thread.run_sync(partial(tmp.mkdir, mode=0o700, parents=True))
            image = await pull(order, tmp / "layout", note, partial(self._room, order.ref))
            config, platform = image_config(image.config)
            check_platform(order.ref, platform)
            started = trio.current_time()
            await unpack(tmp / "layout", tmp / "rootfs")
            size = await trio.to_thread.run_sync(_complete, tmp, image.config, digest, order.ref)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise CacheFull(
                    f"image cache full: no space left on the disk under {self.root}"
                ) from None
            raise ImageError(f"cannot write the image cache: {exc.strerror or exc}") from None
        await note(f"unpacked in {trio.current_time() - started:.1f} s ({megabytes(size)})")
        if size > self.limit_bytes:
            raise CacheFull(
                f"image cache full: {order.ref} takes {megabytes(size)} unpacked, more than "
                f"the whole cache ({megabytes(self.limit_bytes)}, --image-cache-gb)"
            )
        final = self.root / "sha256" / digest.partition(":")[2]
        if final.exists():  # not a complete entry (those are loaded): a stale one
            await trio.to_thread.run_sync(_rmtree, final)
        os.rename(tmp, final)
        entry = self._entries[digest] = Entry(digest, final, size, config)
        return self._take(entry)

    # -- room

    async def _room(self, ref: str, manifest: Manifest) -> None:
        """Before a copy: refuse an image whose layers alone exceed the limit, and evict
        to make room for them."""
        if manifest.size > self.limit_bytes:
            raise CacheFull(
                f"image cache full: {ref} has {megabytes(manifest.size)} of layers, more than "
                f"the whole cache ({megabytes(self.limit_bytes)}, --image-cache-gb)"
            )
        await self._evict(self._victims(manifest.size))

    def _victims(self, need: int) -> list[Entry]:
        """The least recently used entries no job uses, enough of them to fit ``need``
        more bytes under the limit (fewer when the rest are in use)."""
        over = self.used_bytes() + need - self.limit_bytes
        victims: list[Entry] = []
        for entry in self._entries.values():
            if over <= 0:
                break
            if not self.pinned(entry.digest):
                victims.append(entry)
                over -= entry.size
        return victims

    async def _evict(self, victims: list[Entry]) -> None:
        """Take ``victims`` out of the cache (renamed to ``trash/`` at once, removed in a
        thread)."""
        if not victims:
            return
        moved: list[Path] = []
        for entry in victims:
            del self._entries[entry.digest]
            self._serial += 1
            trash = self.root / "trash" / f"{entry.path.name}.{self._serial}"
            try:
                os.rename(entry.path, trash)
                moved.append(trash)
            except OSError as exc:
                log.warning("image cache: cannot evict", extra={"error": str(exc)})
            log.info("image evicted", extra={"digest": entry.digest, "size_bytes": entry.size})
        self._write_index()
        for path in moved:
            await trio.to_thread.run_sync(_rmtree, path)
