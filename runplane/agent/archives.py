"""Archive mounts unpacked safely: a .zip or .tar.gz whose entries must stay inside the
mount (no absolute names, ``..``, symlinks or hard links pointing out, devices), bounded
in entries and bytes (zip bombs), every write re-checked against its real parent
(``docs/artifacts.md``, archives)."""

from __future__ import annotations

import contextlib
import gzip
import os
import posixpath
import stat
import tarfile
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

#: Unpacking stops (and the mount fails) past this many entries or bytes: zip bombs.
MAX_ARCHIVE_ENTRIES = 200_000
MAX_UNPACKED_BYTES = 64 * 1024**3
_CHUNK = 1024 * 1024
ArchiveKind = Literal["zip", "tar.gz"]


class Refused(Exception):
    """Why one mount failed (without the mount's name, which MountError adds)."""


def archive_kind(path: Path) -> ArchiveKind:
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if head.startswith(b"\x1f\x8b"):
        return "tar.gz"
    raise Refused("not a .zip or .tar.gz archive")


def _entry_name(raw: str) -> str:
    """An archive entry's path, normalized and checked to stay inside the mount."""
    name = raw
    if "\\" in name:
        raise Refused(f"archive entry {raw!r} has a backslash in its name")
    if "\0" in name:
        raise Refused(f"archive entry {raw!r} has a NUL in its name")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise Refused(f"archive entry {raw!r} is an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise Refused(f"archive entry {raw!r} escapes the mount ('..')")
    return "/".join(parts)


def _link_inside(entry: str, link: str) -> str:
    """The mount-relative path a symlink at ``entry`` pointing to ``link`` resolves to."""
    if link.startswith("/") or "\\" in link or "\0" in link:
        raise Refused(f"archive symlink {entry!r} -> {link!r} points outside the mount")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(entry), link))
    if resolved == ".." or resolved.startswith("../"):
        raise Refused(f"archive symlink {entry!r} -> {link!r} points outside the mount")
    return "" if resolved == "." else resolved


@dataclass(slots=True)
class _Entry:
    name: str
    kind: Literal["file", "dir", "symlink", "hardlink"]
    mode: int
    size: int
    link: str = ""


class _Unpacker:
    """Writes checked entries under ``root``; every write re-checks that its parent really is
    inside ``root`` (nothing written through a symlink) and opens with O_NOFOLLOW."""

    def __init__(self, root: Path, stop: threading.Event | None) -> None:
        self.root = Path(os.path.realpath(root))
        self.stop = stop
        self.written = 0

    def _parent(self, name: str) -> Path:
        path = self.root.joinpath(*name.split("/"))
        parent = path.parent
        parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        real = Path(os.path.realpath(parent))
        if real != self.root and self.root not in real.parents:
            raise Refused(f"archive entry {name!r} would be written through a symlink")
        return path

    def directory(self, name: str, mode: int) -> None:
        if not name:
            return
        path = self._parent(name)
        if path.is_symlink():
            raise Refused(f"archive entry {name!r} would be written through a symlink")
        path.mkdir(mode=0o755, exist_ok=True)
        os.chmod(path, (mode & 0o755) | 0o700)

    def file(self, name: str, mode: int, source: IO[bytes]) -> None:
        path = self._parent(name)
        with contextlib.suppress(FileNotFoundError):
            if path.is_symlink() or path.is_file():
                path.unlink()
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            while True:
                if self.stop is not None and self.stop.is_set():
                    raise Refused("stopped")
                chunk = source.read(_CHUNK)
                if not chunk:
                    break
                self.written += len(chunk)
                if self.written > MAX_UNPACKED_BYTES:
                    raise Refused(f"archive unpacks to more than {MAX_UNPACKED_BYTES} bytes")
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.chmod(path, (mode & 0o755) | 0o600)

    def symlink(self, name: str, link: str) -> None:
        path = self._parent(name)
        if path.is_dir() and not path.is_symlink():
            raise Refused(f"archive symlink {name!r} replaces a directory")
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.symlink(link, path)

    def hardlink(self, name: str, target: str) -> None:
        source = self.root.joinpath(*target.split("/"))
        real = Path(os.path.realpath(source))
        if self.root not in real.parents or not real.is_file():
            raise Refused(f"archive hard link {name!r} -> {target!r} points outside the mount")
        with open(real, "rb") as fh:
            self.file(name, stat.S_IMODE(os.stat(real).st_mode), fh)


def _checked(entries: Iterator[_Entry]) -> list[_Entry]:
    """All entries, or Refused for the first that could escape (nothing is written before
    the whole archive passed)."""
    out: list[_Entry] = []
    total = 0
    for entry in entries:
        if len(out) >= MAX_ARCHIVE_ENTRIES:
            raise Refused(f"archive has more than {MAX_ARCHIVE_ENTRIES} entries")
        total += entry.size
        if total > MAX_UNPACKED_BYTES:
            raise Refused(f"archive unpacks to more than {MAX_UNPACKED_BYTES} bytes")
        if entry.kind == "symlink":
            _link_inside(entry.name, entry.link)
        elif entry.kind == "hardlink":
            entry.link = _entry_name(entry.link)
        out.append(entry)
    return out


def _tar_entries(archive: tarfile.TarFile) -> Iterator[_Entry]:
    for member in archive.getmembers():
        name = _entry_name(member.name)
        if member.isdir():
            yield _Entry(name, "dir", member.mode, 0)
        elif member.isreg():
            yield _Entry(name, "file", member.mode, member.size)
        elif member.issym():
            yield _Entry(name, "symlink", 0, 0, member.linkname)
        elif member.islnk():
            yield _Entry(name, "hardlink", 0, 0, member.linkname)
        else:
            raise Refused(f"archive entry {member.name!r} is a device, fifo or other special file")


def _zip_entries(archive: zipfile.ZipFile) -> Iterator[_Entry]:
    for info in archive.infolist():
        name = _entry_name(info.filename)
        mode = (info.external_attr >> 16) & 0xFFFF
        if info.is_dir():
            yield _Entry(name, "dir", stat.S_IMODE(mode) or 0o755, 0)
        elif stat.S_ISLNK(mode):
            if info.file_size > 4096:
                raise Refused(f"archive symlink {info.filename!r} is malformed")
            link = archive.read(info).decode("utf-8", errors="replace")
            yield _Entry(name, "symlink", 0, 0, link)
        elif stat.S_IFMT(mode) not in (0, stat.S_IFREG):
            raise Refused(f"archive entry {info.filename!r} is a special file")
        else:
            yield _Entry(name, "file", stat.S_IMODE(mode) or 0o644, info.file_size)


def unpack_archive(path: Path, target: Path, *, stop: threading.Event | None = None) -> int:
    """Unpack the .zip or .tar.gz at ``path`` into the directory ``target`` (created);
    returns the number of entries. Refuses, before writing anything, an archive with an
    entry that would land outside ``target`` (absolute, ``..``, a symlink or hard link
    pointing out, a special file); while writing, never follows a symlink out."""
    kind = archive_kind(path)
    target.mkdir(mode=0o755, parents=True, exist_ok=True)
    unpacker = _Unpacker(target, stop)
    try:
        if kind == "zip":
            with zipfile.ZipFile(path) as zf:
                entries = _checked(_zip_entries(zf))
                infos = {_entry_name(i.filename): i for i in zf.infolist()}
                _write_entries(unpacker, entries, lambda e: zf.open(infos[e.name]))
        else:
            with tarfile.open(path, mode="r:gz") as tf:
                entries = _checked(_tar_entries(tf))
                members = {_entry_name(m.name): m for m in tf.getmembers()}

                def open_member(e: _Entry) -> IO[bytes]:
                    fh = tf.extractfile(members[e.name])
                    if fh is None:
                        raise Refused(f"archive entry {e.name!r} cannot be read")
                    return fh

                _write_entries(unpacker, entries, open_member)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise Refused(f"corrupt archive: {exc}") from None
    return len(entries)


def _write_entries(
    unpacker: _Unpacker, entries: list[_Entry], open_entry: Callable[[_Entry], IO[bytes]]
) -> None:
    links: list[_Entry] = []
    for entry in entries:
        if entry.kind == "dir":
            unpacker.directory(entry.name, entry.mode)
        elif entry.kind == "file":
            with open_entry(entry) as source:
                unpacker.file(entry.name, entry.mode, source)
        else:
            links.append(entry)
    # links last: a symlink made early could otherwise redirect a later entry's write
    made: list[str] = []
    for entry in links:
        if entry.kind == "symlink":
            unpacker.symlink(entry.name, entry.link)
            made.append(entry.name)
        else:
            unpacker.hardlink(entry.name, entry.link)
    # Each link was checked on its own; a chain (d -> ., e -> d/..) can still lead out.
    for name in made:
        path = unpacker.root.joinpath(*name.split("/"))
        real = Path(os.path.realpath(path))
        if real != unpacker.root and unpacker.root not in real.parents:
            for other in made:
                with contextlib.suppress(OSError):
                    unpacker.root.joinpath(*other.split("/")).unlink()
            raise Refused(f"archive symlink {name!r} leads outside the mount")
