"""Mounts on the agent: archives unpacked safely (zip-slip and symlink tricks refused), git
at a revision, files and directories, inline code, read-only mode, errors naming the mount."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
import trio

from runplane.agent.archives import Refused
from runplane.agent.isolation import HostPaths
from runplane.agent.protocol import MountSpec
from runplane.agent.workspace import (
    Mount,
    MountError,
    clone_git,
    make_read_only,
    mounts_of,
    prepare_mounts,
    unpack_archive,
)

# --------------------------------------------------------------------------- archives


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return path


def _file(name: str, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


def _zip(path: Path, entries: dict[str, bytes], symlinks: dict[str, str] | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return path


def test_tar_gz_unpacks_with_modes_dirs_and_inside_links(tmp_path: Path) -> None:
    archive = _tar(
        tmp_path / "ok.tar.gz",
        [
            (_file("./src/run.sh", 0o755), b"#!/bin/sh\necho hi\n"),
            (_file("src/data/x.txt"), b"x"),
            (_link("src/latest", "data/x.txt"), None),
            (_link("top", "src/data"), None),
            (_link("src/hard", "src/data/x.txt", tarfile.LNKTYPE), None),
        ],
    )
    target = tmp_path / "work"
    assert unpack_archive(archive, target) == 5
    assert (target / "src/run.sh").read_bytes().startswith(b"#!/bin/sh")
    assert os.access(target / "src/run.sh", os.X_OK)
    assert (target / "src/latest").read_bytes() == b"x"
    assert (target / "top/x.txt").read_bytes() == b"x"
    assert (target / "src/hard").read_bytes() == b"x"


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ([(_file("../escape.txt"), b"x")], "escapes the mount"),
        ([(_file("a/../../escape.txt"), b"x")], "escapes the mount"),
        ([(_file("/tmp/abs.txt"), b"x")], "absolute path"),
        ([(_link("evil", "/etc"), None)], "points outside"),
        ([(_link("evil", "../../.."), None)], "points outside"),
        ([(_link("a/b/evil", "../../../x"), None)], "points outside"),
        ([(_link("evil", "/etc/passwd", tarfile.LNKTYPE), None)], "absolute path"),
        ([(_link("evil", "../x", tarfile.LNKTYPE), None)], "escapes the mount"),
        ([(_link("dev", "", tarfile.CHRTYPE), None)], "special file"),
        ([(_link("fifo", "", tarfile.FIFOTYPE), None)], "special file"),
        ([(_file("a\\..\\..\\x"), b"x")], "backslash"),
    ],
)
def test_tar_entries_that_could_escape_refuse_the_archive(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], why: str
) -> None:
    archive = _tar(tmp_path / "evil.tar.gz", [(_file("fine.txt"), b"ok"), *members])
    target = tmp_path / "deep" / "work"
    with pytest.raises(Refused, match=why):
        unpack_archive(archive, target)
    # refused before anything was written
    assert not (target / "fine.txt").exists()
    assert not list(tmp_path.rglob("escape.txt")) and not list(tmp_path.rglob("x"))


def test_a_symlink_then_a_file_through_it_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    # the classic: a link to a directory outside, then a file written "into" the link
    archive = _tar(
        tmp_path / "evil.tar.gz",
        [(_link("dir", str(outside)), None), (_file("dir/owned.txt"), b"x")],
    )
    with pytest.raises(Refused):
        unpack_archive(archive, tmp_path / "work")
    assert list(outside.iterdir()) == []


def test_a_chain_of_links_that_each_look_inside_is_refused(tmp_path: Path) -> None:
    archive = _tar(
        tmp_path / "chain.tar.gz",
        [(_link("here", "."), None), (_link("up", "here/.."), None)],
    )
    target = tmp_path / "work"
    with pytest.raises(Refused, match="leads outside"):
        unpack_archive(archive, target)
    assert not (target / "up").is_symlink()


def test_an_existing_symlink_in_the_target_is_not_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = tmp_path / "work"
    target.mkdir()
    (target / "sub").symlink_to(outside)
    archive = _tar(tmp_path / "a.tar.gz", [(_file("sub/x.txt"), b"x")])
    with pytest.raises(Refused, match="through a symlink"):
        unpack_archive(archive, target)
    assert list(outside.iterdir()) == []


def test_zip_unpacks_and_refuses_zip_slip_and_symlinks_out(tmp_path: Path) -> None:
    good = _zip(tmp_path / "ok.zip", {"a/b.txt": b"b", "c/": b""}, {"a/l": "b.txt"})
    target = tmp_path / "work"
    assert unpack_archive(good, target) == 3
    assert (target / "a/l").read_bytes() == b"b" and (target / "c").is_dir()
    cases = [
        ({"../slip.txt": b"x"}, None, "escapes the mount"),
        ({"/abs.txt": b"x"}, None, "absolute path"),
        ({"a\\..\\..\\slip.txt": b"x"}, None, "backslash"),
        ({"ok.txt": b"x"}, {"l": "/etc/passwd"}, "points outside"),
        ({"ok.txt": b"x"}, {"l": "../../x"}, "points outside"),
    ]
    for i, (entries, links, why) in enumerate(cases):
        archive = _zip(tmp_path / f"evil{i}.zip", entries, links)
        with pytest.raises(Refused, match=why):
            unpack_archive(archive, tmp_path / f"w{i}")
        assert not (tmp_path / f"w{i}" / "ok.txt").exists()
    assert not list(tmp_path.rglob("slip.txt"))


def test_not_an_archive_or_corrupt(tmp_path: Path) -> None:
    plain = tmp_path / "x.tar.gz"
    plain.write_bytes(b"hello")
    with pytest.raises(Refused, match=r"not a \.zip or \.tar\.gz"):
        unpack_archive(plain, tmp_path / "w")
    broken = tmp_path / "y.tar.gz"
    broken.write_bytes(b"\x1f\x8b\x08\x00" + b"\0" * 20)
    with pytest.raises(Refused, match="corrupt"):
        unpack_archive(broken, tmp_path / "w2")


# --------------------------------------------------------------------------- git


def _git(*args: str, cwd: Path) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    work = tmp_path / "src"
    work.mkdir()
    _git("init", "-q", "-b", "main", cwd=work)
    commits = {}
    for n in (1, 2, 3):
        (work / "n.txt").write_text(f"{n}\n")
        _git("add", ".", cwd=work)
        _git("commit", "-q", "-m", f"c{n}", cwd=work)
        commits[f"c{n}"] = _git("rev-parse", "HEAD", cwd=work)
        if n == 1:
            _git("tag", "v1", cwd=work)
        if n == 2:
            _git("branch", "feature", cwd=work)
    bare = tmp_path / "repo.git"
    _git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    return bare, commits


@pytest.mark.parametrize(
    ("rev", "expect", "content"),
    [("", "c3", "3\n"), ("#main", "c3", "3\n"), ("#v1", "c1", "1\n"), ("#feature", "c2", "2\n")],
)
async def test_git_checks_out_branches_tags_and_default(
    tmp_path: Path, repo: tuple[Path, dict[str, str]], rev: str, expect: str, content: str
) -> None:
    bare, commits = repo
    target = tmp_path / "out"
    commit = await clone_git(f"file://{bare}{rev}", target, HostPaths.of([tmp_path], []))
    assert commit == commits[expect]
    assert (target / "n.txt").read_text() == content


async def test_git_checks_out_a_commit_by_sha(
    tmp_path: Path, repo: tuple[Path, dict[str, str]]
) -> None:
    bare, commits = repo
    allowed = HostPaths.of([tmp_path], [])
    for rev in (commits["c2"], commits["c1"][:10]):
        target = tmp_path / f"out-{rev}"
        got = await clone_git(f"file://{bare}#{rev}", target, allowed)
        assert got in (commits["c2"], commits["c1"])
    assert (tmp_path / f"out-{commits['c1'][:10]}" / "n.txt").read_text() == "1\n"


async def test_git_failures_say_why(tmp_path: Path, repo: tuple[Path, dict[str, str]]) -> None:
    bare, _ = repo
    allowed = HostPaths.of([tmp_path], [])
    with pytest.raises(Refused, match="no branch, tag or commit 'nope'"):
        await clone_git(f"file://{bare}#nope", tmp_path / "a", allowed)
    with pytest.raises(Refused, match="git fetch failed"):
        await clone_git(f"file://{tmp_path}/missing.git", tmp_path / "b", allowed)
    with pytest.raises(Refused, match="a git ref is"):
        await clone_git("--upload-pack=touch /tmp/pwned", tmp_path / "c")


# --------------------------------------------------------------------------- all types


async def test_every_mount_type_and_read_only(
    tmp_path: Path, repo: tuple[Path, dict[str, str]]
) -> None:
    bare, commits = repo
    node_file = tmp_path / "node.cfg"
    node_file.write_text("cfg")
    node_dir = tmp_path / "dataset"
    (node_dir / "sub").mkdir(parents=True)
    (node_dir / "sub" / "d.csv").write_text("1,2")
    workdir = tmp_path / "jobs" / "job_1" / "1"
    notes: list[str] = []

    async def note(line: str) -> None:
        notes.append(line)

    mounts = mounts_of(
        MountSpec(type="inline", path="main.py", ref="print('hi')\n", mode="ro"),
        [
            MountSpec(type="git", path="lib", ref=f"file://{bare}#v1", mode="ro"),
            MountSpec(type="file", path="conf/app.cfg", ref=str(node_file)),
            MountSpec(type="dir", path="data", ref=f"file://{node_dir}", mode="ro"),
            MountSpec(type="dir", path="scratch"),
        ],
    )
    allowed = HostPaths.of([tmp_path], [tmp_path / "jobs"])
    await prepare_mounts(workdir, mounts, scratch=tmp_path / "pull", note=note, host_paths=allowed)
    assert (workdir / "main.py").read_text() == "print('hi')\n"
    assert (workdir / "lib" / "n.txt").read_text() == "1\n"
    assert (workdir / "conf" / "app.cfg").read_text() == "cfg"
    assert (workdir / "data" / "sub" / "d.csv").read_text() == "1,2"
    assert (workdir / "scratch").is_dir()
    assert not (tmp_path / "pull").exists()
    assert notes == [f"inputs[0]: git file://{bare} at v1 -> commit {commits['c1']}"]
    for ro in ("main.py", "lib/n.txt", "lib", "data/sub/d.csv", "data/sub"):
        assert stat.S_IMODE((workdir / ro).stat().st_mode) & 0o222 == 0, ro
    assert stat.S_IMODE((workdir / "conf" / "app.cfg").stat().st_mode) & 0o200
    if os.getuid() != 0:  # root ignores permission bits
        with pytest.raises(PermissionError):
            (workdir / "lib" / "n.txt").write_text("changed")


async def test_read_only_workspace_at_the_root_keeps_the_root_writable(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "w.tar.gz", [(_file("code/a.py"), b"x")])
    workdir = tmp_path / "w"
    workdir.mkdir()
    (workdir / "code").mkdir()
    unpack_archive(archive, workdir)
    make_read_only(workdir, include_top=False)
    assert stat.S_IMODE(workdir.stat().st_mode) & 0o200
    assert stat.S_IMODE((workdir / "code").stat().st_mode) & 0o222 == 0
    assert stat.S_IMODE((workdir / "code" / "a.py").stat().st_mode) & 0o222 == 0


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        (MountSpec(type="file", path="x", ref="/no/such/file"), "not a file on this node"),
        (MountSpec(type="dir", path="x", ref="/no/such/dir"), "not a directory on this node"),
        (MountSpec(type="file", path="../x", ref="/etc/hostname"), "must stay inside"),
        (MountSpec(type="archive", path="x", ref="http://127.0.0.1:9/x.zip"), "cannot fetch"),
        (MountSpec(type="git", path="x", ref="file:///no/such/repo.git"), "git fetch failed"),
    ],
)
async def test_a_failing_mount_names_itself(tmp_path: Path, spec: MountSpec, why: str) -> None:
    mounts = [Mount("workspace", MountSpec(type="dir", path="")), Mount("inputs[0]", spec)]
    allowed = HostPaths.of(["/no"], [])
    with pytest.raises(MountError) as caught:
        await prepare_mounts(tmp_path / "w", mounts, scratch=tmp_path / "pull", host_paths=allowed)
    message = str(caught.value)
    assert message.startswith(f"inputs[0] ({spec.type} "), message
    assert why in message
    assert not (tmp_path / "pull").exists()


async def test_a_mount_path_through_a_symlink_out_is_refused(tmp_path: Path) -> None:
    workdir = tmp_path / "w"
    workdir.mkdir()
    (workdir / "out").symlink_to(tmp_path)
    mounts = [Mount("inputs[0]", MountSpec(type="inline", path="out/x.py", ref="x"))]
    with pytest.raises(MountError, match="leads outside"):
        await prepare_mounts(workdir, mounts, scratch=tmp_path / "pull")
    assert not (tmp_path / "x.py").exists()


async def test_cancel_stops_a_slow_download(tmp_path: Path) -> None:
    listener = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener[0].socket.getsockname()[1]

    async def stall(stream: trio.SocketStream) -> None:
        await stream.receive_some(4096)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\nxx")
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, stall, listener)
        mounts = [
            Mount("workspace", MountSpec(type="archive", ref=f"http://127.0.0.1:{port}/a.zip"))
        ]
        with trio.move_on_after(0.5) as scope:
            await prepare_mounts(tmp_path / "w", mounts, scratch=tmp_path / "pull")
        assert scope.cancelled_caught
        assert not (tmp_path / "pull").exists()
        nursery.cancel_scope.cancel()
