"""Job uids given back in batches (``runplane/agent/uid_releases.py``,
``UidPool.release_many``): every uid of a batch is swept whole (its processes killed, its
files in the shared dirs handed back to root, its lock marked clean and released), each
release gets its own uid's counts, and releases that arrive while a sweep runs are swept
together in the next one. Real uids, real processes (root, as CI runs)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

from runplane.agent.leftovers import _status_uids
from runplane.agent.uid_releases import Releases
from runplane.agent.uids import UidPool, UidRange

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a uid per job)")
#: A uid range of these tests' own
BASE = 1_960_001_000


def _run_as(uid: int, tag: str) -> subprocess.Popen[bytes]:
    """A process of ``uid`` that leaves a file of its own in /tmp and stays."""
    return subprocess.Popen(
        [
            "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "sh", "-c", f"echo x > /tmp/rp-rel-{tag}-{uid}; exec sleep 300",
        ],
        start_new_session=True,
    )  # fmt: skip


def _wait_file(path: Path) -> None:
    deadline = time.monotonic() + 10
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert path.exists(), path


@root_only
def test_a_batch_sweeps_every_uid_whole_and_counts_each_apart(tmp_path: Path) -> None:
    locks, tag = tmp_path / "locks", uuid.uuid4().hex[:8]
    pool = UidPool(UidRange(BASE, BASE + 9), locks)
    pool.check()
    users = [pool.take(("job", n)) for n in range(3)]
    # job 0 leaves two processes and a file, job 1 one of each, job 2 nothing
    procs = [_run_as(users[0].uid, tag), _run_as(users[1].uid, tag)]
    procs.append(
        subprocess.Popen(
            ["setpriv", f"--reuid={users[0].uid}", f"--regid={users[0].uid}",
             "--clear-groups", "sleep", "300"],
            start_new_session=True,
        )
    )  # fmt: skip
    own = tmp_path / "own"
    own.mkdir()
    os.lchown(own, users[2].uid, users[2].uid)
    try:
        for uid in (users[0].uid, users[1].uid):
            _wait_file(Path(f"/tmp/rp-rel-{tag}-{uid}"))
        _wait_uid(procs[2].pid, users[0].uid)
        results = pool.release_many([(("job", 0), ()), (("job", 1), ()), (("job", 2), [own])])
        released = [r for r in results if r is not None and not isinstance(r, Exception)]
        assert [(r.uid, r.killed, r.handed_back, r.freed) for r in released] == [
            (users[0].uid, 2, 1, True),
            (users[1].uid, 1, 1, True),
            (users[2].uid, 0, 0, True),
        ]
        assert all(p.wait(timeout=5) == -9 for p in procs)
        for uid in (users[0].uid, users[1].uid):
            assert os.lstat(f"/tmp/rp-rel-{tag}-{uid}").st_uid == 0  # handed back to root
        assert os.lstat(own).st_uid == os.geteuid()
        for user in users:  # given back swept: the next take of each needs no sweep
            assert (locks / str(user.uid)).read_bytes() == b"clean\n"
        assert pool.in_use() == {}
        assert pool.release_many([(("job", 0), ())]) == [None]  # not held any more
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        for path in Path("/tmp").glob(f"rp-rel-{tag}*"):
            path.unlink()
        pool.close()


def _wait_uid(pid: int, uid: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = _status_uids(str(pid))
        if found is not None and uid in found[0]:
            return
        time.sleep(0.01)  # setpriv switches to the uid once it runs
    raise AssertionError(f"process {pid} never ran as {uid}")


@root_only
async def test_releases_that_arrive_during_a_sweep_share_the_next(tmp_path: Path) -> None:
    pool = UidPool(UidRange(BASE + 20, BASE + 39), tmp_path / "locks")
    pool.check()
    holders = [("job", n) for n in range(12)]
    uids = {holder: pool.take(holder).uid for holder in holders}
    batches: list[int] = []
    sweep = pool.release_many

    def observed(items: Any) -> Any:  # the real sweep, its batch sizes noted
        batches.append(len(items))
        time.sleep(0.05)  # a sweep long enough for the others to arrive meanwhile
        return sweep(items)

    pool.release_many = observed  # type: ignore[method-assign]
    releases = Releases(pool)
    got: dict[Any, Any] = {}

    async def release(holder: Any) -> None:
        got[holder] = await releases.release(holder)

    async with trio.open_nursery() as nursery:
        for holder in holders:
            nursery.start_soon(release, holder)
    # the first release sweeps alone; the eleven that arrived meanwhile share the next
    assert batches == [1, len(holders) - 1], batches
    assert {h: (r.uid, r.freed) for h, r in got.items()} == {h: (uids[h], True) for h in holders}
    assert pool.in_use() == {}
    # later releases (one at a time) still go through, each its own batch
    holder = ("job", 99)
    pool.take(holder)
    released = await releases.release(holder)
    assert released is not None and released.freed and batches[-1] == 1
    assert await releases.release(("nobody", 1)) is None
    pool.close()
