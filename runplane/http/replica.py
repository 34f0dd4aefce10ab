"""One replica of ``runplane serve`` under ``RUNPLANE_HA=1`` (docs/operations.md "High
availability").

Every replica opens the shared PostgreSQL store (migrations are serialized across
processes), serves HTTP through the gate (``runplane/http/gate.py``) and campaigns for the
leader lease (``runplane/ha/elector.py``). Once it takes the lease it sets the store's
fencing epoch, starts its app's lifespan (the actor tree, which rebuilds every actor from
the store, exactly as at a restart) and only then lets the gate hand requests to its own
app. Until then, and for ever on a follower, the gate proxies to the leader.

A lost lease (renewal refused or too late, or a commit fenced by a newer epoch) ends the
process at once, exit code 3, without running the shutdown path: nothing of an old
leader may write or send after a new one took over, and its supervisor starts it again as
a follower. A clean stop (SIGTERM) of the leader stops its actor tree, flushes the store
and gives the lease back, so a follower takes over at its next look instead of after the
lease's end.
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

#: exit code of a replica that lost the lease (its supervisor restarts it as a follower)
EXIT_LOST_LEASE = 3


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


class Replica:
    def __init__(self, settings: Settings, **app_options: Any) -> None:
        assert settings.ha and settings.database_url is not None
        self.settings = settings
        self.id = replica_id()
        self.fence = Fence(idle_timeout_ms=int(settings.ha_lease_sec * 1000))
        self.store = PostgresStore(settings.database_url, fence=self.fence)
        self.app = create_app(
            settings,
            store=self.store,
            ha_status=self.status,
            ha_leading=self.surely_leading,
            **app_options,
        )
        self.gate = Gate(self.app, status=self.status, leader=self._leader)
        self.elector: Elector | None = None
        self._stop_app = trio.Event()
        self._app_stopped = trio.Event()

    @property
    def lost(self) -> trio.Event:
        assert self.elector is not None
        return self.elector.lost

    def status(self) -> dict[str, Any]:
        if self.elector is None:
            return {"ha": True, "replica": self.id, "role": "starting", "epoch": None}
        return self.elector.status()

    def surely_leading(self) -> bool:
        return self.elector is not None and self.elector.surely_leading()

    def _leader(self) -> tuple[int, str] | None:
        row = self.elector.known if self.elector is not None else None
        if row is None or row.holder == self.id:
            return None  # none known, or this replica (still rebuilding)
        return row.epoch, row.address

    async def open(self) -> None:
        await self.store.open()

    async def run(self, bound: str, *, task_status: trio.TaskStatus[None]) -> None:
        """Campaign, then lead until the lease is lost or ``stop`` is called."""
        settings = self.settings
        assert settings.database_url is not None
        address = settings.ha_advertise_url or advertised(bound)
        lease = LeaseClient(
            settings.database_url, self.id, address, int(settings.ha_lease_sec * 1000)
        )

        def on_leader(row: LeaseRow | None) -> None:
            self.gate.leader_changed(row.epoch if row is not None else None)
            log.info(
                "leader changed",
                extra={
                    "epoch": row.epoch if row else None,
                    "leader": row.holder if row else None,
                    "address": row.address if row else None,
                },
            )

        self.elector = elector = Elector(
            lease,
            ttl=settings.ha_lease_sec,
            poll=min(0.25, settings.ha_lease_sec / 4),
            on_leader=on_leader,
        )
        log.info("replica", extra={"replica": self.id, "address": address})
        task_status.started()
        epoch = await elector.campaign()
        began = time.perf_counter()
        token = trio.lowlevel.current_trio_token()
        self.fence.on_fenced = lambda: token.run_sync_soon(
            elector.lose, "a commit met a newer epoch: another replica leads"
        )
        self.fence.epoch = epoch
        async with trio.open_nursery() as nursery:
            nursery.start_soon(elector.hold)
            await nursery.start(self._lifespan)
            self.gate.leading = True
            log.info(
                "leading",
                extra={
                    "epoch": epoch,
                    "replica": self.id,
                    "rebuild_ms": round((time.perf_counter() - began) * 1000, 1),
                },
            )
            await elector.lost.wait()
            nursery.cancel_scope.cancel()

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

    async def stop(self) -> None:
        """A clean stop: the actor tree, the store, then the lease back to the others."""
        self.gate.leading = False
        if self.elector is not None and self.elector.role == "leader":
            self._stop_app.set()
            await self._app_stopped.wait()
        await self.gate.aclose()
        await self.store.close()
        if self.elector is not None:
            await self.elector.release()
