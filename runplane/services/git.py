"""The git service: creating and listing git connections (``runplane/git/``,
docs/git.md), and resolving a job's git workspace ref with a connection's credential."""

from __future__ import annotations

import logging

import trio

from runplane import egress
from runplane.git import connections
from runplane.git.connections import ACTIVE, DEGRADED, Connection, GitConnectionBody
from runplane.git.probe import GitProbeError, ls_remote
from runplane.persistence import Store
from runplane.problems import FieldProblem, Problem
from runplane.sealing import Sealer
from runplane.settings import Settings

log = logging.getLogger("runplane.git")

#: No create waits longer than this on the network (conventions).
CREATE_NETWORK_SEC = 5.0


def _host_of(url: str) -> tuple[str, int] | None:
    """(host, port) of an http(s) URL, an ``ssh://`` URL or git's ``user@host:path``."""
    if url.startswith(("http://", "https://")):
        target = egress.parse_url(url)
        return target.host, target.port
    rest = url.removeprefix("ssh://")
    hostpart = rest.split("/", 1)[0] if url.startswith("ssh://") else rest.split(":", 1)[0]
    host = hostpart.rsplit("@", 1)[-1]
    port = 22
    if url.startswith("ssh://") and ":" in host:
        host, _, raw = host.partition(":")
        port = int(raw) if raw.isdigit() else 22
    return (host.lower(), port) if host else None


class Git:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.allow = egress.Allow.of(settings.egress_allow)
        self._sealer: Sealer | None = None

    def sealer(self) -> Sealer:
        if self._sealer is None:
            self._sealer = Sealer(self.settings.secret_key_bytes())
        return self._sealer

    async def _guard(self, urls: tuple[tuple[str, str], ...]) -> None:
        """Refuse (400) a host that resolves to an internal address; an unresolvable one
        is left to the probe (the connection is then ``degraded``)."""
        for field, url in urls:
            found = _host_of(url)
            if found is None:
                continue
            host, port = found
            target = egress.Target("https", host, port, "/")
            try:
                await egress.resolve(target, self.allow, timeout=CREATE_NETWORK_SEC)
            except egress.EgressRefused as exc:
                raise Problem(
                    400, "egress_refused", str(exc), [FieldProblem(field, "refused", str(exc))]
                ) from None
            except egress.EgressUnreachable:
                continue

    async def create(self, body: GitConnectionBody, *, org_id: str, created_by: str) -> Connection:
        checked = connections.check(body)
        conn = connections.new(self.sealer(), checked, org_id=org_id, created_by=created_by)
        with trio.move_on_after(CREATE_NETWORK_SEC) as waited:
            await self._guard((("base_url", checked.base_url), ("repo_url", checked.repo_url)))
            conn = await self._probe(conn)
        if waited.cancelled_caught:
            conn = connections.with_status(
                conn, DEGRADED, f"the repository did not answer within {CREATE_NETWORK_SEC:g} s"
            )
        await connections.insert(self.store, conn)
        log.info(
            "git connection created",
            extra={
                "connection_id": conn.id,
                "org_id": conn.org_id,
                "provider": conn.provider,
                "status": conn.status,
            },
        )
        return conn

    async def _probe(self, conn: Connection) -> Connection:
        """Settle ``status``: can the server list the repository's refs with it?"""
        try:
            await ls_remote(
                conn.repo_url, conn.credential(self.sealer()), ("HEAD",), within=CREATE_NETWORK_SEC
            )
        except GitProbeError as exc:
            reason = str(exc)
            if exc.refused and conn.ssh_pub:
                reason = (
                    "the repository refused the generated deploy key: add ssh_pub to its "
                    f"deploy keys ({reason})"
                )
            elif exc.refused:
                reason = f"the repository refused the credential: {reason}"
            return connections.with_status(conn, DEGRADED, reason)
        return connections.with_status(conn, ACTIVE, "")

    async def listing(self, org_id: str | None) -> list[Connection]:
        return await connections.listing(self.store, org_id)
