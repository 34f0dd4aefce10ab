"""One replica of ``runplane serve`` under ``RUNPLANE_HA=1`` (docs/operations.md "High
availability").

Every replica opens the shared PostgreSQL store (migrations are serialized across
processes), serves HTTP through the gate (``runplane/http/gate.py``) and campaigns for the
leader lease (``runplane/ha/elector.py``). Once it takes the lease it sets the store's
fencing epoch, starts its app's lifespan (the actor tree, which rebuilds every actor from
the store, exactly as at a restart) and only then lets the gate hand requests to its own
app. Until then, and for ever on a follower, the gate proxies to the leader.

A replica lives through terms (:class:`Term`): each has a fence, a store, an app (with its
actor tree) and an elector of its own. A lost lease (renewal refused or too late, or a
commit fenced by a newer epoch) ends the term at once, inside the process, without its
shutdown path: the fence is revoked (no commit of that store passes again, and its writer
never reconnects), the gate cuts every exchange with the old app (agents' WebSockets
closed, so they reconnect through the gate to whoever leads), the app's nursery (the actor
tree) is cancelled, then the old store and lease connection are closed, nothing flushed
and nothing given back. The replica logs ``stepped down`` (the lost epoch, the reason),
builds a fresh term behind the same gate and listener, and campaigns again as a follower.
Restarting PostgreSQL therefore never ends a replica.

Only a step-down that cannot finish ends the process, at once with exit code 3 (its
supervisor starts it again): the old term's tasks still running ``STEP_DOWN_SEC`` after the
loss, or an error while stepping down. A clean stop (SIGTERM) of the leader stops its
actor tree, flushes the store and gives the lease back, so a follower takes over at its
next look instead of after the lease's end.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import trio

from runplane.ha.elector import Elector
from runplane.ha.lease import LeaseClient, LeaseRow
from runplane.http.app import create_app
from runplane.http.gate import Gate
from runplane.persistence.postgres import Fence, PostgresStore
from runplane.settings import Settings

log = logging.getLogger("runplane.ha")

#: exit code of a replica that could not step down inside its process (its supervisor
#: starts it again, as a follower)
EXIT_STEP_DOWN_FAILED = 3
#: how long the tasks of a lost term may take to end before the process gives up (exit 3)
STEP_DOWN_SEC = 30.0
#: the wait between tries to open a new term's store (the database may be restarting)
REOPEN_SEC = 1.0


def replica_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def advertised(bound: str) -> str:
    """The URL other replicas reach this one at, from its bound one: a wildcard bind
    names this host."""
    parts = urlsplit(bound)
    host = parts.hostname or ""
    if host in ("0.0.0.0", "::"):
        return f"{parts.scheme}://{socket.getfqdn()}:{parts.port}"
    return bound


class Term:
    """One term of a replica: its own fence, store and app (its ``ha_leading`` is this
    term's: False for ever once its lease is lost, whatever a later term holds), and the
    elector that campaigns for it and holds the lease while it leads. Nothing of a term is
    used again once its lease is lost."""

    def __init__(self, replica: Replica) -> None:
        settings = replica.settings
        assert settings.database_url is not None
        self.replica = replica
        self.fence = Fence(idle_timeout_ms=int(settings.ha_lease_sec * 1000))
        self.store = PostgresStore(settings.database_url, fence=self.fence)
        self.app = create_app(
            settings,
            store=self.store,
            ha_status=replica.status,
            ha_leading=self.surely_leading,
            **replica.app_options,
        )
        self.elector: Elector | None = None
        self._stop_app = trio.Event()
        self._app_stopped = trio.Event()

    def surely_leading(self) -> bool:
        """This term leads and its lease surely still runs (False for ever once lost)."""
        return self.elector is not None and self.elector.surely_leading()

    def make_elector(self, address: str, on_leader: Callable[[LeaseRow | None], Any]) -> Elector:
        settings = self.replica.settings
        assert settings.database_url is not None
        lease = LeaseClient(
            settings.database_url, self.replica.id, address, int(settings.ha_lease_sec * 1000)
        )
        self.elector = Elector(
            lease,
            ttl=settings.ha_lease_sec,
            poll=min(0.25, settings.ha_lease_sec / 4),
            on_leader=on_leader,
        )
        return self.elector

    async def open(self, *, retry: bool) -> None:
        """Open the store; with ``retry``, until it opens (a new term after a step-down:
        the database may be restarting), saying so once."""
        warned = False
        while True:
            try:
                await self.store.open()
                return
            except Exception as exc:
                if not retry:
                    raise
                if not warned:
                    log.warning("cannot open the store; retrying", extra={"error": str(exc)})
                warned = True
            await trio.sleep(REOPEN_SEC)

    async def lead(self) -> str:
        """Campaign; once elected, lead until the lease is lost, then stop this term's
        tasks at once (no shutdown path). Returns once they all ended; the reason."""
        elector, gate = self.elector, self.replica.gate
        assert elector is not None
        epoch = await elector.campaign()
        began = time.perf_counter()
        token = trio.lowlevel.current_trio_token()
        self.fence.on_fenced = lambda: token.run_sync_soon(
            elector.lose, "a commit met a newer epoch: another replica leads"
        )
        self.fence.epoch = epoch
        async with trio.open_nursery() as nursery:
            nursery.start_soon(elector.hold)
            nursery.start_soon(self._end_at_loss, nursery.cancel_scope)
            try:
                await nursery.start(self._lifespan)  # cancelled by a loss meanwhile
            except Exception as exc:  # e.g. the store went away as the tree was rebuilt
                elector.lose(f"the actor tree did not start: {exc}")
            else:
                if elector.lost.is_set():  # lost as the tree started: never serve it
                    return elector.reason or "the lease is lost"
                gate.leading = True
                log.info(
                    "leading",
                    extra={
                        "epoch": epoch,
                        "replica": self.replica.id,
                        "rebuild_ms": round((time.perf_counter() - began) * 1000, 1),
                    },
                )
        return elector.reason or "the lease is lost"

    async def _end_at_loss(self, term_scope: trio.CancelScope) -> None:
        """At the lost lease (not at a clean stop), end this term's tasks at once."""
        assert self.elector is not None
        await self.elector.lost.wait()
        if not self.replica.stopping:
            self.fence.revoke()  # first: no commit of this term passes from now on
            self.replica.gate.step_down()  # no request reaches the old app; open ones cut
            term_scope.cancel()  # the actor tree, its lifespan, the renewals

    async def _lifespan(self, *, task_status: trio.TaskStatus[None]) -> None:
        """Drive the Quart app's ASGI lifespan: startup now, shutdown at ``stop``."""
        to_app, app_inbox = trio.open_memory_channel[dict[str, Any]](1)
        app_outbox, from_app = trio.open_memory_channel[dict[str, Any]](1)
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        app: Callable[..., Awaitable[None]] = self.app
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(app, scope, app_inbox.receive, app_outbox.send)
                await to_app.send({"type": "lifespan.startup"})
                reply = await from_app.receive()
                if reply["type"] != "lifespan.startup.complete":
                    raise RuntimeError(f"the app did not start: {reply.get('message', reply)}")
                task_status.started()
                await self._stop_app.wait()
                await to_app.send({"type": "lifespan.shutdown"})
                await from_app.receive()
        finally:
            self._app_stopped.set()

    async def abandon(self) -> None:
        """After a lost lease, once this term's tasks ended: close what it holds without
        flushing or giving anything back (its queued writes fail under the revoked
        fence)."""
        for gen in self.app.while_serving_gens:
            await gen.aclose()  # the lifespan's shutdown path does not run (runplane/http/app.py)
        await self.store.close()
        if self.elector is not None:
            await self.elector.abandon()

    async def stop(self) -> None:
        """A clean stop: the actor tree, the store, then the lease back to the others."""
        if self.elector is not None and self.elector.role == "leader":
            self._stop_app.set()
            await self._app_stopped.wait()
        await self.store.close()
        if self.elector is not None:
            await self.elector.release()


class Replica:
    def __init__(self, settings: Settings, **app_options: Any) -> None:
        assert settings.ha and settings.database_url is not None
        self.settings = settings
        self.app_options = app_options
        self.id = replica_id()
        self.address: str | None = None
        #: lost terms so far (each one stepped down)
        self.step_downs = 0
        self.stopping = False
        #: set when a step-down could not finish: the process must end (exit code 3)
        self.failed = trio.Event()
        self.term = Term(self)
        self.gate = Gate(self.term.app, status=self.status, leader=self._leader)

    def status(self) -> dict[str, Any]:
        elector = self.term.elector
        if elector is not None:
            return elector.status()
        role = "follower" if self.step_downs else "starting"
        return {"ha": True, "replica": self.id, "address": self.address, "role": role,
                "epoch": None, "leader": None}  # fmt: skip

    def _leader(self) -> tuple[int, str] | None:
        elector = self.term.elector
        row = elector.known if elector is not None else None
        if row is None or row.holder == self.id:
            return None  # none known, or this replica (rebuilding, or its lost term)
        return row.epoch, row.address

    def _on_leader(self, row: LeaseRow | None) -> None:
        self.gate.leader_changed(row.epoch if row is not None else None)
        log.info(
            "leader changed",
            extra={
                "epoch": row.epoch if row else None,
                "leader": row.holder if row else None,
                "address": row.address if row else None,
            },
        )

    async def open(self) -> None:
        await self.term.open(retry=False)

    async def run(self, bound: str, *, task_status: trio.TaskStatus[None]) -> None:
        """Campaign and lead, term after term, until ``stop`` is called (or a step-down
        cannot finish: ``failed`` is set)."""
        self.address = address = self.settings.ha_advertise_url or advertised(bound)
        log.info("replica", extra={"replica": self.id, "address": address})
        task_status.started()
        while True:
            term = self.term
            elector = term.make_elector(address, self._on_leader)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._watch, elector)
                    reason = await term.lead()
                    if self.stopping:
                        nursery.cancel_scope.cancel()
                        return
                    await term.abandon()
                    nursery.cancel_scope.cancel()
            except Exception:
                if not elector.lost.is_set():
                    # the actor tree crashed past its restart intensity: the process ends
                    # non-zero, as a single server's does (docs/architecture.md)
                    raise
                log.exception("could not step down", extra={"epoch": elector.epoch})
                self.failed.set()
                return
            self.step_downs += 1
            log.warning(
                "stepped down",
                extra={"epoch": elector.epoch, "reason": reason, "replica": self.id},
            )
            self.term = Term(self)
            self.gate.serve(self.term.app)
            await self.term.open(retry=True)

    async def _watch(self, elector: Elector) -> None:
        """A term's tasks must all end within ``STEP_DOWN_SEC`` of its lost lease."""
        await elector.lost.wait()
        await trio.sleep(STEP_DOWN_SEC)
        if not self.stopping:
            log.error(
                "could not step down",
                extra={
                    "epoch": elector.epoch,
                    "reason": f"the old term's tasks did not end within {STEP_DOWN_SEC:g} s",
                },
            )
            self.failed.set()

    async def stop(self) -> None:
        """A clean stop: the actor tree, the store, then the lease back to the others."""
        self.stopping = True
        self.gate.leading = False
        await self.term.stop()
        await self.gate.aclose()
