"""Walls between jobs on a shared node: every attempt of a root agent runs as a uid of its
own (``runplane/agent/uids.py``). Real processes on a real agent (the in-test
``FakeServer`` speaks the protocol), both executors: one job cannot read another's
environment, files or streams, nor signal it; a uid reused later finds nothing of the job
before; a uid another live agent holds is neither swept nor given out; what a killed
agent's jobs left is swept at the next start.

Tests marked ``root`` need the run as root (as CI does)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

from runplane.agent.client import SHARED_UID_OK, UID_CAPABILITIES, UID_PER_JOB, Agent
from runplane.agent.isolation import RunAsError
from runplane.agent.leftovers import _status_uids, take_back
from runplane.agent.protocol import Cancel, Hello, JobFinished, JobLogs, JobPhase
from runplane.agent.protocol import PodServiceSpec as Service
from runplane.agent.uids import DEFAULT_UID_RANGE, UidPool, UidRange
from runplane.placement import model as placement_model
from tests.agent.test_client import FakeServer, make_agent, run_msg
from tests.agent.workroot import reachable_work_dir

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a uid per job)")
SECRET = "zz-private-value-123"
PATH = {"PATH": "/usr/bin:/bin"}  # the system python: the test venv's is under /root
#: A uid range of the tests' own (not the default range a real agent here may use)
BASE = 1_960_000_000


def test_a_uid_range_is_two_numbers_above_the_system_users() -> None:
    assert UidRange.parse("2000000-2000009") == UidRange(2_000_000, 2_000_009)
    assert len(UidRange.parse(" 5000-5000 ")) == 1
    assert UidRange.default() == UidRange(*DEFAULT_UID_RANGE)
    assert 1_950_000_000 in UidRange.default() and 999 not in UidRange.default()
    for bad in ("", "5000", "a-b", "5000-", "-5000"):
        with pytest.raises(ValueError, match="give FIRST-LAST, two numbers"):
            UidRange.parse(bad)
    for bad in ("0-10", "999-2000", "6000-5000", f"5000-{2**31}"):
        with pytest.raises(ValueError, match="1000 <= FIRST <= LAST"):
            UidRange.parse(bad)
    with pytest.raises(ValueError, match="--uid-range 'x'"):
        Agent("http://127.0.0.1:9", Path("/nonexistent"), uid_range="x")


def test_the_capability_names_are_the_ones_placement_reads() -> None:
    assert UID_PER_JOB == placement_model.UID_PER_JOB
    assert SHARED_UID_OK == placement_model.SHARED_UID_OK
    assert UID_CAPABILITIES == placement_model.UID_CAPABILITIES


@root_only
def test_a_range_holding_a_user_of_the_node_is_refused(tmp_path: Path) -> None:
    nobody = 65534
    pool = UidPool(UidRange(nobody - 1, nobody + 1), tmp_path / "locks")
    with pytest.raises(RunAsError, match="uid 65534 is the user nobody of this node"):
        pool.check()


# --------------------------------------------------------------------------- helpers


def uid_agent(tmp_path: Path, server: FakeServer, first: int, count: int, **kw: Any) -> Agent:
    options: dict[str, Any] = {"uid_lock_dir": tmp_path / "uid-locks", **kw}
    return make_agent(tmp_path, server, uid_range=f"{first}-{first + count - 1}", **options)


async def until(check: Any, within: float = 10.0) -> None:
    """Poll ``check`` (what the agent does to files and processes has no event)."""
    with trio.fail_after(within):
        while True:
            if check():
                return
            await trio.sleep(0.02)


def _gone(pid: int) -> bool:
    """Whether the process is gone (a zombie counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except OSError:
        return True


def stdout(server: FakeServer, job_id: str) -> list[str]:
    return server.stdout(job_id)


def all_text(server: FakeServer, job_id: str) -> str:
    return "\n".join(t for m in server.of(JobLogs) if m.job_id == job_id for _, t in m.lines)


async def running(server: FakeServer, agent: Agent, job_id: str) -> tuple[int, int]:
    """(pid, uid) of the attempt's first process, once it runs."""
    await server.wait(JobPhase, lambda m: m.job_id == job_id and m.phase == "running")
    key = (job_id, 1)
    job = agent.core.jobs[key]
    uid = agent.uids.uid_of(key) if agent.uids is not None else None
    assert uid is not None
    return min(job.pids), uid


def owner_and_mode(path: Path) -> tuple[int, int]:
    st = os.lstat(path)
    return st.st_uid, stat.S_IMODE(st.st_mode)


#: What job B tries against job A, one line each: ``<what>: ok`` or ``<what>: <errno>``.
PROBE = r"""
import errno, os, sys
pid, work, streams = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def attempt(what, fn):
    try:
        fn()
        print(what + ": ok")
    except OSError as exc:
        print(what + ": " + errno.errorcode.get(exc.errno, str(exc.errno)))
def read(path):
    with open(path, "rb") as f:
        data = f.read()
    print(data.decode("utf-8", "replace").replace("\0", " "))
attempt("environ", lambda: read(f"/proc/{pid}/environ"))
attempt("fd", lambda: os.listdir(f"/proc/{pid}/fd"))
attempt("kill", lambda: os.kill(pid, 0))
attempt("workdir", lambda: os.listdir(work))
attempt("input", lambda: read(os.path.join(work, "in", "data.txt")))
attempt("written", lambda: read(os.path.join(work, "mine.txt")))
attempt("write", lambda: open(os.path.join(work, "planted.txt"), "w").close())
attempt("streams", lambda: os.listdir(streams))
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            read(f"/proc/{p}/environ")
        except OSError:
            pass
print("uid", os.getuid(), os.getgid(), os.getgroups())
"""


# --------------------------------------------------------------------------- two jobs


@root_only
@pytest.mark.parametrize("executor", ["process", "sandbox"])
async def test_a_job_cannot_reach_another_running_job(
    nursery: trio.Nursery, tmp_path: Path, executor: str
) -> None:
    if executor == "sandbox" and shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap")
    server = await FakeServer.start(nursery)
    agent = uid_agent(tmp_path, server, BASE, 10, executor=executor)
    await nursery.start(agent.run)
    hello = server.hellos()[0]
    assert UID_PER_JOB in hello.facts.capabilities
    a_script = 'echo mine > mine.txt; echo tick > "$RUNPLANE_STREAMS_DIR/t"; exec sleep 60'
    await server.send(
        run_msg(
            ["sh", "-c", a_script],
            "job_a",
            env={"OTHER_TENANT_KEY": SECRET, **PATH},
            inline_files={"in/data.txt": "tenant a's input\n"},
            mask=[SECRET],  # an org secret (${secrets.NAME}) arrives so
        )
    )
    pid, uid_a = await running(server, agent, "job_a")
    work_a = agent.work_root / "job_a" / "1"
    streams_a = agent.work_root / "job_a" / "1.streams"
    await until(lambda: (work_a / "mine.txt").exists())
    assert owner_and_mode(work_a) == (uid_a, 0o700)
    assert owner_and_mode(streams_a) == (uid_a, 0o700)

    await server.send(
        run_msg(["python3", "-c", PROBE, str(pid), str(work_a), str(streams_a)], "job_b", env=PATH)
    )
    fin = await server.wait(JobFinished, lambda m: m.job_id == "job_b")
    assert fin.outcome == "succeeded", all_text(server, "job_b")
    out = stdout(server, "job_b")
    results = dict(line.split(": ", 1) for line in out if ": " in line)
    uid_b = int(next(line for line in out if line.startswith("uid ")).split()[1])
    assert uid_b != uid_a and {uid_a, uid_b} <= set(range(BASE, BASE + 10))
    assert f"uid {uid_b} {uid_b} []" in out  # gid the same number, no other group
    if executor == "process":
        # the kernel's checks between two uids
        assert results == {
            "environ": "EACCES",
            "fd": "EACCES",
            "kill": "EPERM",
            "workdir": "EACCES",
            "input": "EACCES",
            "written": "EACCES",
            "write": "EACCES",
            "streams": "EACCES",
        }, out
    else:
        # the sandbox: another pid namespace, the work root hidden
        assert set(results.values()) == {"ENOENT", "ESRCH"}, out
        assert results["kill"] == "ESRCH"
    assert SECRET not in all_text(server, "job_b")
    assert not (work_a / "planted.txt").exists()

    # A ends: its processes are gone, its uid is free, its directories are root's again
    await server.send(Cancel(job_id="job_a", attempt=1))
    await server.wait(JobFinished, lambda m: m.job_id == "job_a")
    await until(lambda: agent.uids is not None and not agent.uids.in_use())
    assert _gone(pid)
    assert owner_and_mode(work_a) == (0, 0o700)
    assert owner_and_mode(streams_a) == (0, 0o700)
    assert os.lstat(work_a / "mine.txt").st_uid == 0


@root_only
async def test_a_pod_runs_as_one_uid_of_its_own(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await FakeServer.start(nursery)
    agent = uid_agent(tmp_path, server, BASE + 100, 10)
    await nursery.start(agent.run)
    pod = [
        Service(
            name="sim",
            command=["sh", "-c", "id -u > sim.uid; exec sleep 60"],
            env={"OTHER_TENANT_KEY": SECRET},
        ),
        Service(
            name="bridge", command=["sh", "-c", "id -u > bridge.uid; exec sleep 60"], needs=["sim"]
        ),
    ]
    await server.send(run_msg(["true"], "job_pod", pod=pod, env=PATH))
    key = ("job_pod", 1)
    work = agent.work_root / "job_pod" / "1"

    def written(name: str) -> str:
        path = work / name
        return path.read_text().strip() if path.exists() else ""

    await until(lambda: bool(written("sim.uid") and written("bridge.uid")))
    uid = agent.uids.uid_of(key) if agent.uids else None
    assert written("sim.uid") == written("bridge.uid") == str(uid)
    pids = sorted(agent.core.jobs[key].pids)
    await server.send(
        run_msg(
            ["python3", "-c", PROBE, str(pids[0]), str(work), str(work.with_name("1.streams"))],
            "job_b",
            env=PATH,
        )
    )
    await server.wait(JobFinished, lambda m: m.job_id == "job_b")
    out = stdout(server, "job_b")
    assert "environ: EACCES" in out and "kill: EPERM" in out and "workdir: EACCES" in out
    assert SECRET not in all_text(server, "job_b")
    await server.send(Cancel(job_id="job_pod", attempt=1))
    await server.wait(JobFinished, lambda m: m.job_id == "job_pod")


# --------------------------------------------------------------------------- reuse


@root_only
async def test_a_reused_uid_finds_nothing_of_the_job_before(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    agent = uid_agent(tmp_path, server, BASE + 200, 1)  # one uid: the second job reuses it
    await nursery.start(agent.run)
    tag = uuid.uuid4().hex[:8]
    left = [Path(f"/tmp/rp-left-{tag}"), Path(f"/dev/shm/rp-left-{tag}")]
    hidden = Path(f"/tmp/rp-dir-{tag}")
    script = (
        "echo private > mine.txt; chmod 0777 .; "
        + "".join(f"echo private > {p}; chmod 0600 {p}; " for p in left)
        + f"mkdir -m 0700 {hidden}; echo private > {hidden}/f; "
        "setsid sleep 300 > /dev/null 2>&1 < /dev/null & echo $! > bg.pid; "
        "ipcmk -M 4096 > /dev/null; echo done"
    )
    try:
        await server.send(run_msg(["sh", "-c", script], "job_a", env=PATH))
        fin = await server.wait(JobFinished, lambda m: m.job_id == "job_a")
        assert fin.outcome == "succeeded", all_text(server, "job_a")
        work_a = agent.work_root / "job_a" / "1"
        await until(lambda: agent.uids is not None and not agent.uids.in_use())
        assert _gone(int((work_a / "bg.pid").read_text()))  # it left the process group
        # what it left in the shared dirs is root's now; its workdir too, 0777 undone
        for path in [*left, hidden]:
            assert os.lstat(path).st_uid == 0, path
        assert owner_and_mode(work_a) == (0, 0o700)
        assert str(BASE + 200) not in await trio.Path("/proc/sysvipc/shm").read_text()

        probe = (
            f"cat {work_a}/mine.txt || echo no-workdir; "
            + "".join(f"cat {p} || echo denied; " for p in [*left, hidden / "f"])
            + f"rm -f {left[0]} || echo kept; id -u"
        )
        await server.send(run_msg(["sh", "-c", probe], "job_b", env=PATH))
        await server.wait(JobFinished, lambda m: m.job_id == "job_b")
        assert stdout(server, "job_b") == [
            "no-workdir", "denied", "denied", "denied", "kept", str(BASE + 200)
        ]  # fmt: skip
        assert "private" not in all_text(server, "job_b")
    finally:
        for path in left:
            path.unlink(missing_ok=True)
        shutil.rmtree(hidden, ignore_errors=True)


# --------------------------------------------------------------------------- agents


@root_only
async def test_a_uid_another_live_agent_holds_is_neither_swept_nor_given(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    locks = tmp_path / "uid-locks"  # one lock dir for the host's agents
    server = await FakeServer.start(nursery)
    first = uid_agent(tmp_path / "one", server, BASE + 300, 2, uid_lock_dir=locks)
    await nursery.start(first.run)
    await server.send(run_msg(["sleep", "60"], "job_a", env=PATH))
    pid, uid_a = await running(server, first, "job_a")

    other_server = await FakeServer.start(nursery)
    second = uid_agent(tmp_path / "two", other_server, BASE + 300, 2, uid_lock_dir=locks)
    await nursery.start(second.run)  # its start-up sweep runs now
    assert not _gone(pid)
    await other_server.send(run_msg(["id", "-u"], "job_b", env=PATH))
    await other_server.wait(JobFinished, lambda m: m.job_id == "job_b")
    assert stdout(other_server, "job_b") == [str(BASE + 300 + (1 - (uid_a - BASE - 300)))]
    assert not _gone(pid)
    await server.send(Cancel(job_id="job_a", attempt=1))
    await server.wait(JobFinished, lambda m: m.job_id == "job_a")


@root_only
def test_the_start_up_sweep_kills_and_removes_what_a_killed_agent_left(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    uids = UidRange(BASE + 400, BASE + 409)
    stale, live = BASE + 401, BASE + 402
    work_root = reachable_work_dir()
    assert work_root is not None
    attempt = work_root / "job_x" / "1"
    attempt.mkdir(parents=True)
    (attempt / "secret.txt").write_text("x")
    for path in (attempt / "secret.txt", attempt):
        os.lchown(path, stale, stale)
    attempt.chmod(0o777)
    tag = uuid.uuid4().hex[:8]
    left = Path(f"/tmp/rp-stale-{tag}")
    other = UidPool(UidRange(live, live), locks)  # another agent, alive, holding one uid
    other.check()
    assert other.take(("job_y", 1)).uid == live
    procs = [
        subprocess.Popen(
            [
                "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                "sh", "-c", f"echo x > /tmp/rp-stale-{tag}-{uid}; exec sleep 300",
            ],
            start_new_session=True,
        )
        for uid in (stale, live)
    ]  # fmt: skip
    try:
        for uid in (stale, live):
            path = Path(f"/tmp/rp-stale-{tag}-{uid}")
            deadline = time.monotonic() + 10
            while not path.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        left.write_text("x")
        os.lchown(left, stale, stale)

        restarted = UidPool(uids, locks)
        restarted.check()
        swept = restarted.sweep_stale(work_root)
        assert swept.killed == 1 and swept.uids == [stale]
        assert procs[0].wait(timeout=5) == -9
        assert procs[1].poll() is None  # the live agent's job runs on
        assert os.lstat(left).st_uid == 0
        assert os.lstat(f"/tmp/rp-stale-{tag}-{stale}").st_uid == 0
        assert os.lstat(f"/tmp/rp-stale-{tag}-{live}").st_uid == live  # not swept
        assert swept.handed_back == 3  # two files in /tmp, one attempt directory
        assert owner_and_mode(attempt) == (0, 0o700)
        assert os.lstat(attempt / "secret.txt").st_uid == 0
        other.close()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        for path in Path("/tmp").glob(f"rp-stale-{tag}*"):
            path.unlink()


@root_only
async def test_agents_that_share_one_uid_say_so(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await FakeServer.start(nursery)
    shared = make_agent(tmp_path / "a", server, run_as="root", extra_capabilities=[UID_PER_JOB])
    await nursery.start(shared.run)
    allowed = make_agent(tmp_path / "b", server, run_as="root", shared_uid_ok=True)
    await nursery.start(allowed.run)
    first, second = (h.facts.capabilities for h in server.of(Hello))
    assert UID_PER_JOB not in first and SHARED_UID_OK not in first  # not the operator's to say
    assert SHARED_UID_OK in second and UID_PER_JOB not in second
    assert shared.uids is None and allowed.uids is None


def test_take_back_makes_a_tree_the_agents_again(tmp_path: Path) -> None:
    top = tmp_path / "work"
    (top / "sub").mkdir(parents=True)
    (top / "sub" / "f").write_text("x")
    (top / "link").symlink_to("/etc/passwd")
    top.chmod(0o777)
    take_back(top)
    assert owner_and_mode(top) == (os.geteuid(), 0o700)
    assert os.lstat(top / "sub" / "f").st_uid == os.geteuid()
    take_back(tmp_path / "missing")  # nothing to do


@root_only
def test_a_uid_a_killed_agent_held_is_swept_before_it_is_given_again(tmp_path: Path) -> None:
    locks, uid = tmp_path / "locks", BASE + 500
    first = UidPool(UidRange(uid, uid), locks)
    first.check()
    assert first.take(("job_x", 1)).uid == uid
    orphan = subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "300"],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while uid not in (leftovers_uids(orphan.pid) or ()) and time.monotonic() < deadline:
            time.sleep(0.01)  # setpriv switches to the uid once it runs
        first.close()  # the agent died: its lock went with it, its job's process did not
        again = UidPool(UidRange(uid, uid), locks)
        assert again.take(("job_y", 1)).uid == uid
        assert orphan.wait(timeout=5) == -9  # swept before job_y got the uid
        released = again.release(("job_y", 1))
        assert released is not None and released.freed and released.killed == 0
        # given back swept: the next take needs no sweep (its lock file says so)
        assert (locks / str(uid)).read_bytes() == b"clean\n"
        again.take(("job_z", 1))
        assert (locks / str(uid)).read_bytes().startswith(b"held by pid ")
        again.close()
    finally:
        orphan.kill()
        orphan.wait()


def leftovers_uids(pid: int) -> tuple[int, ...] | None:
    found = _status_uids(str(pid))
    return None if found is None else found[0]
