"""Limits that hold on the node, with real processes: memory (killed and reported as out of
memory), pids (a fork loop stays bounded), no_internet (a namespace with loopback only),
CPU (a quota), on both executors; the launch chain's pieces; the GPU pool.

Runs what this machine can enforce (as root: cgroup v1 or v2 and bubblewrap; the CI
machine has both); a test whose mechanism is missing is skipped saying which.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runplane.agent import cgroups
from runplane.agent.executor import ExecSpec, Finished, LogLines, run_job
from runplane.agent.gpus import GpuPool, visible_env
from runplane.agent.isolation import JobUser, make_workdir, prepare_work_root
from runplane.agent.jobplan import NodeRules
from runplane.agent.launch import (
    CommandNotExecutable,
    CommandNotFound,
    Launch,
    resolve_program,
)
from runplane.agent.limits import LIMIT_CAPABILITIES, Enforcement, JobLimits, probe
from runplane.agent.protocol import Gpu, RunLimits
from runplane.placement.model import LIMIT_CAPABILITIES as PLACEMENT_LIMITS

from .workroot import reachable_work_dir

ENFORCEMENT = probe()
CGROUPS = ENFORCEMENT.cgroups
needs_cgroups = pytest.mark.skipif(
    CGROUPS is None or not {"memory", "pids", "cpu"} <= CGROUPS.controllers,
    reason="no writable memory/cpu/pids cgroups here (needs root on a cgroup host)",
)
needs_bwrap = pytest.mark.skipif(
    ENFORCEMENT.bwrap is None, reason="bubblewrap cannot create namespaces here"
)
EXECUTORS = ["process", pytest.param("sandbox", marks=needs_bwrap)]
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


@pytest.fixture
def work_root(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[Path, JobUser | None]]:
    # as root, a uid of the range held as each attempt holds one (uids.py); else the
    # agent's own
    user = request.getfixturevalue("range_uid") if os.geteuid() == 0 else None
    root = prepare_work_root(tmp_path / "agent", user, reachable_work_dir())
    yield root, user


def rules(executor: str, user: JobUser | None, root: Path, **kw: Any) -> NodeRules:
    return NodeRules(
        node="n1",
        executor="sandbox" if executor == "sandbox" else "process",
        enforcement=kw.pop("enforcement", ENFORCEMENT),
        user=user,
        hidden=(root,),
        **kw,
    )


async def run(
    node: NodeRules, root: Path, name: str, command: list[str], limits: RunLimits | None
) -> tuple[Finished, list[tuple[str, str]]]:
    plan = node.plan(("job", name), limits)
    assert plan.refusal is None and plan.hand_back is None
    workdir = root / name / "1"
    make_workdir(workdir, root)
    spec = ExecSpec(
        job_id=f"job_{name}",
        command=command,
        env=dict(plan.env),
        workdir=workdir,
        user=node.user,
        launch=plan.launch,
        grace_sec=1,
    )
    lines: list[tuple[str, str]] = []

    async def report(event: object) -> None:
        if isinstance(event, LogLines):
            lines.extend(event.lines)

    try:
        finished = await run_job(spec, report)
    finally:
        node.release(("job", name))
    return finished, lines


def py(code: str) -> list[str]:
    return [PYTHON, "-c", textwrap.dedent(code)]


ALLOCATE_2GB = py("b = bytearray(2 * 1024**3); print('allocated', len(b))")


# --------------------------------------------------------------------------- memory


@needs_cgroups
@pytest.mark.parametrize("executor", EXECUTORS)
async def test_a_job_over_its_memory_limit_is_killed_and_reported_out_of_memory(
    executor: str, work_root: tuple[Path, JobUser | None]
) -> None:
    root, user = work_root
    node = rules(executor, user, root)
    small, lines = await run(node, root, "small", ALLOCATE_2GB, RunLimits(ram_gb=1))
    assert small.outcome == "failed"
    assert small.error is not None
    assert small.error.startswith("out of memory: the job went over its 1 GB memory limit")
    assert "raise limits.ram_gb" in small.error
    assert ("stdout", f"allocated {2 * 1024**3}") not in lines
    big, lines = await run(node, root, "big", ALLOCATE_2GB, RunLimits(ram_gb=4))
    assert big.outcome == "succeeded", lines
    assert ("stdout", f"allocated {2 * 1024**3}") in lines


@needs_cgroups
async def test_a_crash_is_not_called_out_of_memory(work_root: tuple[Path, JobUser | None]) -> None:
    root, user = work_root
    node = rules("process", user, root)
    crashed, _ = await run(
        node, root, "crash", py("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"),
        RunLimits(ram_gb=1),
    )  # fmt: skip
    assert crashed.outcome == "failed"
    assert crashed.error == "killed by signal SIGKILL"


# --------------------------------------------------------------------------- pids

FORK_LOOP = py(
    """
    import os, time
    made = 0
    for _ in range(200):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        made += 1
    print("forked", made, flush=True)
    """
)


@needs_cgroups
@pytest.mark.parametrize("executor", EXECUTORS)
async def test_a_fork_loop_stays_within_pids_and_leaves_nothing_behind(
    executor: str, work_root: tuple[Path, JobUser | None]
) -> None:
    root, user = work_root
    node = rules(executor, user, root)
    finished, lines = await run(node, root, "forks", FORK_LOOP, RunLimits(pids=20))
    forked = [int(text.split()[1]) for stream, text in lines if text.startswith("forked")]
    assert forked, lines
    assert forked[0] < 20  # the limit counts the job's own processes too
    assert finished.outcome == "succeeded"
    # its children (sleeping 30 s) were killed with the job: its cgroups are gone
    assert CGROUPS is not None
    left = [
        p
        for p in CGROUPS.parents.values()
        if any(c.name.startswith("job-forks") for c in p.iterdir())
    ]
    assert left == []
    # and the node still runs jobs
    after, _ = await run(node, root, "after", py("print('fine')"), RunLimits(pids=20))
    assert after.outcome == "succeeded"


# --------------------------------------------------------------------------- cpu


@needs_cgroups
async def test_cpu_cores_sets_a_quota(work_root: tuple[Path, JobUser | None]) -> None:
    root, user = work_root
    node = rules("process", user, root)
    read_quota = py(
        """
        import pathlib
        for line in pathlib.Path('/proc/self/cgroup').read_text().splitlines():
            _, ctrls, path = line.split(':', 2)
            if 'cpu' in ctrls.split(',') or ctrls == '':
                for base in ('/sys/fs/cgroup/cpu', '/sys/fs/cgroup/cpu,cpuacct', '/sys/fs/cgroup'):
                    for name in ('cpu.cfs_quota_us', 'cpu.max'):
                        f = pathlib.Path(base + path) / name
                        if f.exists():
                            print(name, f.read_text().strip())
        """
    )
    finished, lines = await run(node, root, "cpu", read_quota, RunLimits(cpu_cores=2))
    assert finished.outcome == "succeeded", lines
    out = [text for stream, text in lines if stream == "stdout"]
    assert "cpu.cfs_quota_us 200000" in out or "cpu.max 200000 100000" in out, out


# --------------------------------------------------------------------------- network


@needs_bwrap
@pytest.mark.parametrize("executor", EXECUTORS)
async def test_no_internet_cannot_reach_the_hosts_loopback(
    executor: str, work_root: tuple[Path, JobUser | None]
) -> None:
    root, user = work_root
    node = rules(executor, user, root)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    connect = py(
        f"""
        import socket
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
            print("connected")
        except OSError as exc:
            print("refused", exc)
            raise SystemExit(3)
        """
    )
    try:
        cut, lines = await run(node, root, "cut", connect, RunLimits(no_internet=True))
        assert cut.outcome == "failed" and cut.exit_code == 3, lines
        assert any(t.startswith("refused") for s, t in lines if s == "stdout")
        free, lines = await run(node, root, "free", connect, None)
        assert free.outcome == "succeeded", lines
        assert ("stdout", "connected") in lines
    finally:
        listener.close()


# --------------------------------------------------------------------------- the plan


def test_a_limit_the_node_cannot_enforce_is_refused_or_noted() -> None:
    bare = Enforcement()
    strict = NodeRules(node="n1", enforcement=bare)
    plan = strict.plan(("j", 1), RunLimits(ram_gb=2, pids=10))
    assert plan.refusal is not None
    assert "node n1 cannot enforce limits.ram_gb, limits.pids" in plan.refusal
    assert "--best-effort-limits" in plan.refusal
    lenient = NodeRules(node="n1", enforcement=bare, best_effort=True)
    plan = lenient.plan(("j", 1), RunLimits(ram_gb=2, egress_allow=["pypi.org"]))
    assert plan.refusal is None
    assert plan.notes and plan.notes[0].startswith(
        "not enforced on node n1 (best effort): limits.ram_gb, limits.egress_allow"
    )
    assert "limits-best-effort" in lenient.capabilities()
    # nothing asked: nothing refused, no note
    assert strict.plan(("j", 2), None).refusal is None


def test_capability_names_are_the_ones_placement_reads() -> None:
    assert dict(LIMIT_CAPABILITIES) == dict(PLACEMENT_LIMITS)
    assert JobLimits.of({"ram_gb": 0, "pids": 5, "no_internet": True}).asked() == [
        "pids",
        "no_internet",
    ]


def test_gpus_are_assigned_disjoint_and_freed() -> None:
    gpus = [Gpu(model="T4", index=0, uuid="GPU-a"), Gpu(model="T4", index=1, uuid="GPU-b")]
    node = NodeRules(node="n1", gpus=GpuPool(gpus))
    one = node.plan(("a", 1), RunLimits(gpus=1))
    two = node.plan(("b", 1), RunLimits(gpus=1))
    assert [d.id for d in one.gpus] == ["GPU-a"]
    assert [d.id for d in two.gpus] == ["GPU-b"]
    assert one.env == {"CUDA_VISIBLE_DEVICES": "GPU-a", "NVIDIA_VISIBLE_DEVICES": "GPU-a"}
    three = node.plan(("c", 1), RunLimits(gpus=1))
    assert three.hand_back is not None and "0 free GPUs of 2" in three.hand_back
    none = node.plan(("d", 1), None)  # asked for none: sees none
    assert none.env == {"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "void"}
    node.release(("a", 1))
    again = node.plan(("c", 1), RunLimits(gpus=1))
    assert [d.id for d in again.gpus] == ["GPU-a"]
    assert visible_env([], node_has_gpus=False) == {}


# --------------------------------------------------------------------------- pieces


def test_the_launch_chain_joins_cgroups_then_namespaces_then_the_user(tmp_path: Path) -> None:
    group = cgroups.Cgroups("v1", {"memory": tmp_path / "m", "pids": tmp_path / "p"}).job("j.1")
    user = JobUser("u", 1234, 1234)
    launch = Launch(cgroup=group, bwrap="/usr/bin/bwrap", no_internet=True, user=user)
    argv = launch.argv(["/bin/echo", "hi"], tmp_path)
    assert argv[:3] == ["/bin/sh", "-c", argv[2]]
    procs = argv.index("--")
    assert argv[4:procs] == [
        str(tmp_path / "m/j.1/cgroup.procs"),
        str(tmp_path / "p/j.1/cgroup.procs"),
    ]
    rest = argv[procs + 1 :]
    assert rest[0] == "/usr/bin/bwrap" and "--unshare-net" in rest
    setpriv = rest.index("setpriv")
    assert rest[setpriv:] == [
        "setpriv",
        "--reuid=1234",
        "--regid=1234",
        "--clear-groups",
        "--",
        "/bin/echo",
        "hi",
    ]
    assert not Launch().wraps


def test_cgroup_files_parse() -> None:
    v1, v2 = cgroups.own_cgroups("4:memory:/a/b\n3:cpu,cpuacct:/\n0::/c\n")
    assert v1 == {"memory": "/a/b", "cpu": "/", "cpuacct": "/"} and v2 == "/c"
    mounts = (
        "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        "33 31 0:30 /sub /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "34 31 0:31 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
    )
    m1, m2 = cgroups.cgroup_mounts(mounts)
    assert m1 == {"cpu": Path("/sys/fs/cgroup/cpu,cpuacct")}  # memory: a subtree, skipped
    assert m2 == Path("/sys/fs/cgroup/unified")
    with pytest.raises(ValueError):
        cgroups.Cgroups("v1", {}).job("../x")


def test_resolve_program_as_the_job_would(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o700)
    path = f"{tmp_path / 'bin'}:/usr/bin:/bin"
    assert resolve_program("tool", path, tmp_path, None) == str(tool)
    assert resolve_program("sh", path, tmp_path, None).endswith("/sh")
    with pytest.raises(CommandNotFound):
        resolve_program("no-such-tool", path, tmp_path, None)
    with pytest.raises(CommandNotFound):
        resolve_program("./missing", path, tmp_path, None)
    other = JobUser("other", 54321, 54321)
    with pytest.raises(CommandNotExecutable):  # 0700 of another uid
        resolve_program("bin/tool", path, tmp_path, other)


def test_the_probe_reports_capabilities_it_can_back() -> None:
    caps = ENFORCEMENT.capabilities()
    assert ("limit-ram" in caps) == ENFORCEMENT.enforces("ram_gb")
    assert ("limit-no-internet" in caps) == (ENFORCEMENT.bwrap is not None)
    assert "limit-egress" not in caps  # no executor enforces egress_allow yet


@needs_cgroups
def test_cgroups_of_a_gone_agent_are_swept(tmp_path: Path) -> None:
    assert CGROUPS is not None
    dead = _exited_pid()
    parents = list(dict.fromkeys(CGROUPS.parents.values()))
    for parent in parents:
        (parent / f"job_x-1.{dead}").mkdir()
        (parent / f"job_y-1.{os.getpid()}").mkdir()  # a live agent's: kept
    try:
        assert all(cgroups.sweep_stale(p) == 1 for p in parents)
        assert not any((p / f"job_x-1.{dead}").exists() for p in parents)
        assert all((p / f"job_y-1.{os.getpid()}").exists() for p in parents)
    finally:
        for parent in parents:
            for name in (f"job_x-1.{dead}", f"job_y-1.{os.getpid()}"):
                if (parent / name).exists():
                    (parent / name).rmdir()


def _exited_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_node_without_bubblewrap_says_so_once_in_its_limits_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without a working bwrap the probe names why in the notes the agent's "job limits"
    start line carries, and logs no line of its own (it used to, at every start)."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on this PATH
    with caplog.at_level("DEBUG"):
        found = probe(want_cgroups=False)
    assert found.bwrap is None
    assert any(
        n.startswith("bubblewrap (bwrap) is not installed: no_internet") for n in found.notes
    )
    assert not [r for r in caplog.records if "bubblewrap" in r.getMessage()]
