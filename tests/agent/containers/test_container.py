"""A job in its image with bubblewrap, real processes: the image's rootfs as ``/`` (its
marker seen, the host's files not, the rootfs never changed), outputs at ``/work`` on the
node, the image's Env, WorkingDir, Entrypoint, Cmd and User applied, ``no_internet``
giving loopback only, GPUs with the driver files bound in, a cancel leaving nothing."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from runplane.agent.container import command_of, image_user, rootfs_args
from runplane.agent.execspec import ExecSpec, Finished, ImageConfig, Rootfs, Started
from runplane.agent.gpus import GpuPool
from runplane.agent.protocol import Gpu, RunLimits
from tests.agent.workroot import reachable_work_dir

from .conftest import Node, image


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.lstat().st_mode, p.lstat().st_size) for p in root.rglob("*")
    }


@pytest.fixture
def host_only() -> Iterator[Path]:
    """A file on the node at a path the image does not have."""
    path = Path(f"/var/tmp/runplane-host-only-{uuid.uuid4().hex}")
    path.write_text("the host's\n")
    yield path
    path.unlink()


def _interfaces() -> list[str]:
    text = Path("/proc/net/dev").read_text()
    return sorted(line.split(":")[0].strip() for line in text.splitlines()[2:])


async def test_a_job_sees_its_image_as_a_read_only_root_and_writes_its_outputs_to_work(
    node: Node, tmp_path: Path, host_only: Path
) -> None:
    rootfs = image(tmp_path)
    before = _tree(rootfs.path)
    script = (
        "cat /marker; "
        f"test -e {host_only} && echo HOST-VISIBLE; "
        "echo result > /work/out.txt; mkdir -p /work/sub && echo deep > /work/sub/x; "
        "touch /escaped 2>/dev/null && echo ROOT-WRITABLE; "
        "touch /bin/new 2>/dev/null && echo BIN-WRITABLE; "
        'echo "cwd=$(pwd) home=$HOME streams=$RUNPLANE_STREAMS_DIR"; '
        "echo frame > $RUNPLANE_STREAMS_DIR/f1; echo tmp > /tmp/t && cat /tmp/t"
    )
    spec = node.spec("basic", ["sh", "-c", script], rootfs)
    finished = await node.run(spec)
    assert finished.outcome == "succeeded", node.lines
    out = node.out()
    assert out[0] == "runplane-image-marker"
    assert "HOST-VISIBLE" not in out
    assert "ROOT-WRITABLE" not in out and "BIN-WRITABLE" not in out
    assert "cwd=/work home=/work streams=/streams" in out
    assert "tmp" in out
    workdir = node.workdirs["basic"]
    assert (workdir / "out.txt").read_text() == "result\n"
    assert (workdir / "sub" / "x").read_text() == "deep\n"
    assert spec.streams_dir is not None
    assert (spec.streams_dir / "f1").read_text() == "frame\n"
    if node.user is not None:  # the attempt's uid owns what the job wrote
        assert (workdir / "out.txt").stat().st_uid == node.user.uid
    assert _tree(rootfs.path) == before  # the cached rootfs is unchanged
    system = [line[1] for line in node.lines if line[0] == "system"]
    assert f"runs in {rootfs.digest} with bubblewrap" in system


async def test_the_images_env_workingdir_entrypoint_and_cmd_apply(
    node: Node, tmp_path: Path
) -> None:
    rootfs = image(
        tmp_path,
        files={"srv/here": "in srv\n"},
        env=("PATH=/bin", "FROM_IMAGE=image", "BOTH=image"),
        entrypoint=("/bin/sh", "-c"),
        cmd=('echo "cmd: $FROM_IMAGE $BOTH $(cat here)"',),
        working_dir="/srv",
    )
    spec = node.spec("cmd", [], rootfs, env={"BOTH": "job"})
    assert command_of(spec) == ["/bin/sh", "-c", 'echo "cmd: $FROM_IMAGE $BOTH $(cat here)"']
    assert (await node.run(spec)).outcome == "succeeded", node.lines
    assert node.out() == ["cmd: image job in srv"]
    node.lines.clear()
    # the job's command replaces Cmd; the Entrypoint stays
    spec = node.spec("own", ['echo "own: $PWD $PATH"'], rootfs)
    assert (await node.run(spec)).outcome == "succeeded", node.lines
    assert node.out() == ["own: /srv /bin"]


async def test_the_images_user_is_mapped_onto_the_attempts_uid(node: Node, tmp_path: Path) -> None:
    rootfs = image(tmp_path, user="runner")
    assert image_user(rootfs) == (1000, 1000)
    spec = node.spec("user", ["sh", "-c", "id -u; id -g; touch /work/mine"], rootfs)
    assert (await node.run(spec)).outcome == "succeeded", node.lines
    if node.user is None:  # an agent that is not root: the image's user too
        assert node.out() == ["1000", "1000"]
        return
    assert node.out() == ["1000", "1000"]
    mine = node.workdirs["user"] / "mine"
    assert (mine.stat().st_uid, mine.stat().st_gid) == (node.user.uid, node.user.gid)


async def test_an_unknown_image_user_fails_the_job_saying_so(node: Node, tmp_path: Path) -> None:
    rootfs = image(tmp_path, user="nobody-here")
    finished = await node.run(node.spec("nouser", ["true"], rootfs))
    assert finished.outcome == "failed"
    assert finished.error is not None
    assert "the image's User 'nobody-here': no user 'nobody-here' in its /etc/passwd" in (
        finished.error
    )


async def test_no_internet_gives_the_image_loopback_only(node: Node, tmp_path: Path) -> None:
    rootfs = image(tmp_path)
    script = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"
    spec = node.spec("offline", ["sh", "-c", script], rootfs, limits=RunLimits(no_internet=True))
    assert (await node.run(spec)).outcome == "succeeded", node.lines
    assert node.out() == ["lo"]
    node.lines.clear()
    spec = node.spec("online", ["sh", "-c", script], rootfs)
    assert (await node.run(spec)).outcome == "succeeded", node.lines
    assert sorted(node.out()) == _interfaces()  # the node's network, as it is


async def test_a_gpu_job_gets_its_device_env_and_the_driver_files(
    node: Node, tmp_path: Path
) -> None:
    bin_dir = reachable_work_dir() or tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(bin_dir, 0o755)
    smi = bin_dir / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "fake nvidia-smi sees $NVIDIA_VISIBLE_DEVICES"\n')
    smi.chmod(0o755)
    node.rules.gpus = GpuPool([Gpu(model="L4", index=0, uuid="GPU-0000")])
    node.rules.driver_files = (smi,)
    rootfs = image(tmp_path)
    spec = node.spec("gpu", ["nvidia-smi"], rootfs, limits=RunLimits(gpus=1))
    assert (await node.run(spec)).outcome == "succeeded", node.lines
    assert node.out() == ["fake nvidia-smi sees GPU-0000"]
    # a job without a GPU gets no driver files
    spec = node.spec("nogpu", ["sh", "-c", "nvidia-smi || echo none"], rootfs)
    node.lines.clear()
    assert (await node.run(spec)).outcome == "succeeded", node.lines
    assert node.out()[-1] == "none"


async def test_a_cancel_leaves_no_process_of_the_job(node: Node, tmp_path: Path) -> None:
    rootfs = image(tmp_path)
    spec = node.spec("cancel", ["sh", "-c", "sleep 300 & sleep 300; wait"], rootfs)
    finished = await _cancel_when_started(node, spec)
    assert finished.outcome == "cancelled"
    assert _processes_naming(str(node.workdirs["cancel"])) == []


async def _cancel_when_started(node: Node, spec: ExecSpec) -> Finished:
    """Run ``spec``, cancel it half a second (real time) after its command started."""
    cancel, started = trio.Event(), trio.Event()
    result: list[Finished] = []

    async def seen(event: object) -> None:
        if isinstance(event, (Started, Finished)):
            started.set()

    async def run() -> None:
        result.append(await node.run(spec, cancel, seen))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await started.wait()
            await trio.sleep(0.5)
            cancel.set()
    return result[0]


def _processes_naming(text: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{entry}: {cmdline}")
    return found


def test_a_mount_under_an_image_symlink_is_not_made(tmp_path: Path) -> None:
    root = tmp_path / "r"
    (root / "usr" / "lib").mkdir(parents=True)
    (root / "lib").symlink_to("usr/lib")
    (root / "etc").mkdir()
    (root / "etc" / "passwd").write_text("root:x:0:0::/:/bin/sh\n")
    args, blocked = rootfs_args(root, ["/lib/libcuda.so.1", "/etc/hosts", "/work"])
    assert blocked == {"/lib/libcuda.so.1"}
    at = args.index("--symlink")
    assert args[at : at + 3] == ["--symlink", "usr/lib", "/lib"]  # kept as the image has it
    at = args.index("--dir")
    assert args[at - 2 : at + 2] == ["--perms", "0755", "--dir", "/etc"]  # rebuilt for hosts
    assert args[at + 2 : at + 5] == ["--ro-bind", str(root / "etc" / "passwd"), "/etc/passwd"]


def test_the_image_user_forms(tmp_path: Path) -> None:
    base = image(tmp_path)

    def of(user: str) -> tuple[int, int]:
        return image_user(Rootfs(base.digest, base.path, ImageConfig(user=user)))

    assert of("") == (0, 0)
    assert of("runner") == (1000, 1000)
    assert of("1000") == (1000, 1000)
    assert of("4242") == (4242, 4242)
    assert of("4242:77") == (4242, 77)
    assert of("runner:root") == (1000, 0)


@pytest.fixture
def unpacked(tmp_path: Path, busybox_image: Path) -> Rootfs:
    """busybox_image unpacked by umoci (as the image store does) under a 0700 directory."""
    bundle = tmp_path / "cache" / "bundle"
    bundle.parent.mkdir(mode=0o700)
    subprocess.run(
        ["umoci", "unpack", "--image", f"{busybox_image}:img", str(bundle)],
        check=True, capture_output=True,
    )  # fmt: skip
    return Rootfs("sha256:" + "b" * 64, bundle / "rootfs", ImageConfig(env=("PATH=/bin",)))


async def test_a_job_runs_in_an_image_umoci_unpacked_where_its_user_cannot_reach(
    node: Node, unpacked: Rootfs
) -> None:
    spec = node.spec("unpacked", ["sh", "-c", "cat /marker; ls /work"], unpacked)
    assert (await node.run(spec)).outcome == "succeeded", node.lines
    assert node.out()[0] == "runplane-image-marker"


async def test_setup_runs_in_the_image_and_a_timeout_stops_the_job(
    node: Node, tmp_path: Path
) -> None:
    rootfs = image(tmp_path, entrypoint=("/bin/sh", "-c"))
    spec = node.spec(
        "timeout",
        ["cat /work/from-setup; trap 'echo got TERM; exit 7' TERM; sleep 300 & wait"],
        rootfs,
        setup="cat /marker > /work/from-setup",
        timeout_sec=1.5,
    )
    finished = await node.run(spec)
    assert finished.outcome == "timeout", node.lines
    assert "runplane-image-marker" in node.out()
    assert "got TERM" in node.out()  # SIGTERM reached the job inside its namespaces
    assert _processes_naming(str(node.workdirs["timeout"])) == []
