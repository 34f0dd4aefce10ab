"""The elector: one trio task per replica that campaigns for the leader lease, holds it
while leading, and says when it is lost.

    follower --(lease free, expired, or its leader's session gone)--> leader
    leader   --(renew refused, or no renewal before the lease's end)--> lost (the end)

A follower looks at the lease every ``poll`` seconds: that look also tells the gate where
the leader is (``known``) and when the leader changes (``on_leader``). A leader renews every
``ttl / 3`` seconds. It counts its lease as over ``ttl`` seconds after it SENT the last
renewal that succeeded (the database set the end ``ttl`` after it ran that statement, so
never earlier than this): past that with no renewal, or at a renewal refused, the lease is
lost. There is no way back from lost for an elector: the replica steps down inside its
process and campaigns again with a NEW elector (and a new lease connection), so nothing of
the lost term (its epoch, ``elected``, ``lost``, the renewal deadline) carries over
(runplane/http/replica.py, docs/operations.md "High availability").
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import psycopg
import trio

from runplane.ha.lease import LeaseClient, LeaseLost, LeaseRow

log = logging.getLogger("runplane.ha")

#: what a failed look at the lease may raise: the database is away or slow
_DB_ERRORS = (psycopg.Error, OSError)


class Elector:
    def __init__(
        self,
        lease: LeaseClient,
        *,
        ttl: float,
        poll: float,
        on_leader: Callable[[LeaseRow | None], Any] = lambda row: None,
    ) -> None:
        self.lease = lease
        self.ttl = ttl
        self.poll = poll
        self.on_leader = on_leader
        #: the lease row as last read (None: no leader known)
        self.known: LeaseRow | None = None
        self.role = "follower"
        self.elected = trio.Event()
        self.lost = trio.Event()
        #: why the lease was lost (set with ``lost``)
        self.reason: str | None = None
        self._lock = trio.Lock()  # one call on the lease connection at a time
        #: while leading: the trio time before which the lease surely still runs
        self._ends = -math.inf

    @property
    def epoch(self) -> int | None:
        return self.lease.epoch

    async def _call(self, fn: Callable[[], Any]) -> Any:
        async with self._lock:
            # abandoned on cancel: a call past the lease's end is not waited for (the
            # statement_timeout of the lease connection ends it in the database)
            return await trio.to_thread.run_sync(fn, abandon_on_cancel=True)

    def _learn(self, row: LeaseRow | None) -> None:
        before = self.known
        self.known = row
        if (before and before.epoch) != (row and row.epoch):
            self.on_leader(row)

    async def campaign(self) -> int:
        """Look at the lease every ``poll`` s until this replica takes it; its epoch."""
        warned = False
        while True:
            try:
                epoch, row = await self._call(self.lease.try_take)
            except _DB_ERRORS as exc:
                if not warned:
                    log.warning("cannot reach the lease", extra={"error": str(exc)})
                warned = True
                self._learn(None)
                await trio.sleep(self.poll)
                continue
            warned = False
            self._learn(row)
            if epoch is not None:
                self.role = "leader"
                log.info(
                    "took the lease",
                    extra={"epoch": epoch, "replica": self.lease.replica},
                )
                self.elected.set()
                return int(epoch)
            await trio.sleep(self.poll)

    async def hold(self) -> None:
        """Renew every ``ttl / 3`` s while leading; return once the lease is lost."""
        interval = self.ttl / 3
        ends = self._ends = trio.current_time() + self.ttl
        while True:
            sent = trio.current_time()
            try:
                with trio.move_on_at(ends) as timer:
                    expires_at = await self._call(self.lease.renew)
                if timer.cancelled_caught:
                    self.lose("no renewal before the lease ended (the database is slow or away)")
                    return
                ends = self._ends = sent + self.ttl
                if self.known is not None:
                    now = expires_at - self.lease.ttl_ms
                    self.known = replace(self.known, expires_at=expires_at, now=now)
            except LeaseLost as exc:
                self.lose(str(exc))
                return
            except _DB_ERRORS as exc:
                log.warning("lease renewal failed", extra={"error": str(exc)})
                if trio.current_time() >= ends:
                    self.lose(f"no renewal before the lease ended: {exc}")
                    return
            await trio.sleep(max(0.0, min(interval, ends - trio.current_time())))

    def surely_leading(self) -> bool:
        """True while this replica leads and its lease surely still runs. A leader that was
        paused past its lease (SIGSTOP, a stalled VM) reads False at once when it runs
        again, before its renewal says so: nothing is sent to agents then."""
        return self.role == "leader" and trio.current_time() < self._ends

    def lose(self, reason: str) -> None:
        if self.lost.is_set():
            return  # lost once (the renewal and a fenced commit may both say so)
        self.role, self.reason = "lost", reason
        self._ends = -math.inf
        log.error("lost the lease", extra={"epoch": self.epoch, "reason": reason})
        self.lost.set()

    async def release(self) -> None:
        """Give the lease back (a clean stop), best effort."""
        try:
            with trio.move_on_after(self.ttl):
                await self._call(self.lease.release)
        except _DB_ERRORS as exc:
            log.warning("could not give the lease back", extra={"error": str(exc)})
        await trio.to_thread.run_sync(self.lease.close)

    async def abandon(self) -> None:
        """Close the lease connection of a lost term without giving anything back: its
        session's advisory lock goes with it. Waited for ``ttl`` at most (a renewal still
        running on it holds the connection until its statement_timeout)."""
        with trio.move_on_after(self.ttl):
            await trio.to_thread.run_sync(self.lease.close, abandon_on_cancel=True)

    def status(self) -> dict[str, Any]:
        """What ``GET /v1/ha`` answers on this replica."""
        row = self.known
        leader = None
        if row is not None:
            leader = {
                "replica": row.holder,
                "address": row.address,
                "epoch": row.epoch,
                "since": row.acquired_at,
                "lease_ends_in_ms": max(0, row.expires_at - row.now),
            }
        return {
            "ha": True,
            "replica": self.lease.replica,
            "address": self.lease.address,
            "role": self.role,
            "epoch": self.epoch,
            "leader": leader,
        }
