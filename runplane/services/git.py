"""The git service: creating and listing git connections (``runplane/git/``,
docs/git.md), and resolving a job's git workspace ref with a connection's credential."""

from __future__ import annotations

import logging
from typing import Any

import trio

from runplane import egress
from runplane.git import connections
from runplane.git.connections import ACTIVE, DEGRADED, Connection, GitConnectionBody
from runplane.git.probe import GitProbeError, ls_remote, resolve
from runplane.jobs.orders import connection_ids
from runplane.jobs.rows import JobRow
from runplane.persistence import Store
from runplane.problems import FieldProblem, Problem
from runplane.sealing import Sealer
from runplane.settings import Settings

log = logging.getLogger("runplane.git")

#: No create waits longer than this on the network (conventions).
CREATE_NETWORK_SEC = 5.0
#: A submit waits at most this long for a connection's repository to resolve a ref.
RESOLVE_SEC = 10.0


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

    # -- jobs whose mounts clone with a connection

    async def resolve_mounts(self, spec: dict[str, Any], org_id: str) -> None:
        """At submit: each mount naming a connection gets its ref resolved to a commit with
        the connection's credential: ``ref`` becomes ``<repo_url>#<commit>`` (what the agent
        fetches), ``rev`` keeps what was asked, ``commit`` the answer. 404 for a connection
        of another org (or none), 422 for a ref the repository does not have, 503 when the
        repository cannot be reached (the connection is then marked degraded)."""
        fields = [("workspace", spec.get("workspace"))]
        fields += [(f"inputs.{i}", m) for i, m in enumerate(spec.get("inputs") or [])]
        for key, mount in fields:
            if not mount or not mount.get("connection_id"):
                continue
            conn = await connections.get(self.store, mount["connection_id"], org_id)
            if conn.auth_kind != "https_pat":
                message = (
                    "a workspace from an ssh_deploy_key connection is not supported yet: "
                    "use an https_pat connection"
                )
                raise Problem(
                    422, "unsupported", message, [FieldProblem(key, "unsupported", message)]
                )
            rev = mount.get("ref") or conn.default_ref or "HEAD"
            try:
                commit = await resolve(
                    conn.repo_url, conn.credential(self.sealer()), rev, within=RESOLVE_SEC
                )
            except GitProbeError as exc:
                await connections.set_status(self.store, conn.id, DEGRADED, str(exc))
                raise Problem(
                    503,
                    "git_unavailable",
                    f"git connection {conn.id}: {exc}; try again later",
                    headers={"Retry-After": "30"},
                ) from None
            if commit is None:
                message = f"{key}.ref: no branch, tag or commit {rev!r} in {conn.repo_url}"
                raise Problem(
                    422,
                    "unknown_ref",
                    message,
                    [FieldProblem(f"{key}.ref", "unknown_ref", message)],
                )
            if conn.status != ACTIVE:
                await connections.set_status(self.store, conn.id, ACTIVE, "")
            mount.update(ref=f"{conn.repo_url}#{commit}", rev=rev, commit=commit)

    async def mount_auth(self, row: JobRow) -> dict[str, str]:
        """For a run order: connection id -> the Authorization header its mounts fetch
        with (the job's org's connections only)."""
        out: dict[str, str] = {}
        for conn_id in connection_ids(row.spec):
            try:
                conn = await connections.get(self.store, conn_id, row.org_id)
            except Problem:
                continue  # deleted since: the clone fails and says so
            if conn.auth_kind == "https_pat":
                out[conn_id] = conn.credential(self.sealer()).header()
        return out
