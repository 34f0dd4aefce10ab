"""The git service: creating and listing git connections (``runplane/git/``,
docs/git.md), and resolving a job's git workspace ref with a connection's credential."""

from __future__ import annotations

import base64
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from runplane import egress, outbound
from runplane.git import connections
from runplane.git.connections import ACTIVE, DEGRADED, Connection, GitConnectionBody
from runplane.git.mirror import CgiAnswer, Mirrors
from runplane.git.probe import GitProbeError, ls_remote, resolve
from runplane.git.statuses import STATE_OF
from runplane.git.tickets import TICKET_TTL_SEC, Ticket, TicketInvalid, mint, verify
from runplane.jobs import repo as jobs_repo
from runplane.jobs.jobspec import JobSpec, StoredMount
from runplane.jobs.rows import JobRow
from runplane.jobs.transitions import JobTransitioned, Transitions
from runplane.persistence import Store, Tx
from runplane.problems import FieldProblem, Problem
from runplane.runtime import clock
from runplane.sealing import Sealer
from runplane.settings import Settings
from runplane.webhooks import deliveries

log = logging.getLogger("runplane.git")

#: No create waits longer than this on the network (conventions).
CREATE_NETWORK_SEC = 5.0
#: A submit waits at most this long for a connection's repository to resolve a ref.
RESOLVE_SEC = 10.0
#: The git proxy: the repository's answer must start within, and not stall longer than.
PROXY_HEAD_SEC = 30.0
PROXY_IDLE_SEC = 120.0


def _refused(why: str) -> Problem:
    # git asks for credentials again on a 401 with WWW-Authenticate (prompts are off on
    # agents: the fetch then fails with the reason in the job's log)
    return Problem(401, "unauthorized", why, headers={"WWW-Authenticate": 'Basic realm="runplane"'})


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
    def __init__(self, store: Store, settings: Settings, sealer: Callable[[], Sealer]) -> None:
        self.store = store
        self.settings = settings
        #: the server's sealer (the root's, made once the secret key is loaded)
        self.sealer = sealer
        self.allow = egress.Allow.of(settings.egress_allow)
        #: mirrors of the ssh-only repositories, served to agents by the git proxy
        self.mirrors = Mirrors(settings.data_dir / "git-mirrors")

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

    async def resolve_mounts(self, spec: JobSpec, org_id: str) -> JobSpec:
        """At submit: ``spec`` with each mount naming a connection resolved to a commit with
        the connection's credential: ``ref`` becomes ``<repo_url>#<commit>`` (what the agent
        fetches), ``rev`` keeps what was asked, ``commit`` the answer. 404 for a connection
        of another org (or none), 422 for a ref the repository does not have, 503 when the
        repository cannot be reached (the connection is then marked degraded)."""
        workspace = spec.workspace
        if workspace is not None and workspace.connection_id:
            workspace = await self._resolved(workspace, "workspace", org_id)
        inputs = [
            await self._resolved(m, f"inputs.{i}", org_id) if m.connection_id else m
            for i, m in enumerate(spec.inputs)
        ]
        return spec.model_copy(update={"workspace": workspace, "inputs": inputs})

    async def _resolved(self, mount: StoredMount, key: str, org_id: str) -> StoredMount:
        assert mount.connection_id is not None
        conn = await connections.get(self.store, mount.connection_id, org_id)
        rev = mount.ref or conn.default_ref or "HEAD"
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
        return mount.model_copy(
            update={"ref": f"{conn.repo_url}#{commit}", "rev": rev, "commit": commit}
        )

    def follow(self, transitions: Transitions, poke: Callable[[], Awaitable[None]]) -> None:
        """Queue a run's commit status with its phase change, in its transaction; once it
        is stored, ``poke`` the webhook dispatcher that sends it."""

        async def queued(moved: JobTransitioned) -> None:
            if moved.changed and moved.phase.value in STATE_OF and moved.row.spec.connection_ids():
                await poke()  # a commit status was queued with the change

        transitions.in_tx(self.status_tx)
        transitions.subscribe(queued)

    def status_tx(self, moved: JobTransitioned) -> Callable[[Tx], Any] | None:
        """The part of a phase change's transaction that queues the commit status of a
        run from a connection's repository (running: pending; its end: success, failure,
        error); None for other jobs and phases. The connection's ``report_status`` is read
        in the transaction (off: nothing is queued)."""
        row = moved.row
        workspace = row.spec.workspace
        conn_id = workspace.connection_id if workspace is not None else None
        commit = workspace.commit if workspace is not None else None
        status = STATE_OF.get(moved.phase.value)
        if not moved.changed or not conn_id or not commit or status is None:
            return None
        origin = (self.settings.public_url or "").rstrip("/")
        detail = {"commit": commit, "target_url": f"{origin}/runs/{row.id}" if origin else ""}
        return deliveries.fire_status(conn_id, row.org_id, row.id, status, detail)

    async def mount_auth(self, row: JobRow, attempt: int) -> dict[str, str]:
        """For a run order: connection id -> the Authorization header its mounts fetch
        through the git proxy with: a ticket for this attempt, expiring (never the
        connection's secret)."""
        key = self.settings.secret_key_bytes()
        expires = int(clock.wall()) + TICKET_TTL_SEC
        out: dict[str, str] = {}
        for conn_id in row.spec.connection_ids():
            token = mint(key, Ticket(row.id, attempt, conn_id, expires))
            out[conn_id] = "Basic " + base64.b64encode(f"runplane:{token}".encode()).decode()
        return out

    async def proxy(
        self,
        conn_id: str,
        authorization: str | None,
        service_path: str,
        *,
        method: str,
        query: str,
        headers: list[tuple[str, str]],
        body: bytes,
    ) -> outbound.Upstream | CgiAnswer:
        """Forward one smart-HTTP request of an agent's clone to the connection's
        repository with its credential (an ssh one: served from the server's mirror of it,
        brought up to date when the clone starts). 401 without a valid ticket of a live
        attempt."""
        ticket = self._ticket(conn_id, authorization)
        row = await jobs_repo.get_row(self.store, ticket.job_id, None)
        if row is None or row.attempt != ticket.attempt or row.phase.terminal:
            raise _refused("the ticket's attempt is over")
        conn = await connections.get(self.store, conn_id, row.org_id)
        if conn.auth_kind == "ssh_deploy_key":
            return await self._from_mirror(conn, service_path, method, query, headers, body)
        url = conn.repo_url.rstrip("/") + "/" + service_path + (f"?{query}" if query else "")
        try:
            target, addresses = await egress.check(url, self.allow)
            auth = ("Authorization", conn.credential(self.sealer()).header())
            return await outbound.open_stream(
                method,
                target,
                addresses,
                headers=[*headers, auth],
                body=body,
                head_within=PROXY_HEAD_SEC,
                idle_within=PROXY_IDLE_SEC,
            )
        except (egress.EgressRefused, egress.EgressUnreachable, outbound.SendError) as exc:
            raise Problem(502, "git_unavailable", f"git connection {conn.id}: {exc}") from None

    async def _from_mirror(
        self,
        conn: Connection,
        service_path: str,
        method: str,
        query: str,
        headers: list[tuple[str, str]],
        body: bytes,
    ) -> CgiAnswer:
        try:
            if service_path == "info/refs":  # a clone starts: fetch what is new
                await self.mirrors.refresh(conn.id, conn.repo_url, conn.credential(self.sealer()))
            return await self.mirrors.serve(
                conn.id, service_path, method=method, query=query, headers=headers, body=body
            )
        except GitProbeError as exc:
            await connections.set_status(self.store, conn.id, DEGRADED, str(exc))
            raise Problem(502, "git_unavailable", f"git connection {conn.id}: {exc}") from None

    def _ticket(self, conn_id: str, authorization: str | None) -> Ticket:
        if not authorization or not authorization.startswith("Basic "):
            raise _refused("a git fetch ticket is required")
        try:
            user_pass = base64.b64decode(authorization[6:], validate=True).decode()
        except ValueError:
            raise _refused("a git fetch ticket is required") from None
        token = user_pass.partition(":")[2]
        try:
            return verify(
                self.settings.secret_key_bytes(), token, connection_id=conn_id, now=clock.wall()
            )
        except TicketInvalid as exc:
            raise _refused(str(exc)) from None
