"""The webhooks service: what routes and the job actors call about outgoing webhooks.

It knows which orgs have endpoints (read at start, kept up to date by create and
delete), so a run of an org without any adds nothing to the transaction that ends it;
for the others :meth:`end_tx` is that transaction's part that queues the deliveries
(``runplane/webhooks/deliveries.py`` ``fire``), and :meth:`ended` pokes the dispatcher
(``runplane/actors/webhooks.py``) once it is stored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from runplane import egress
from runplane.actors.webhooks import DispatchMsg, Poke
from runplane.jobs.phase import JobState
from runplane.jobs.rows import JobRow
from runplane.jobs.transitions import JobTransitioned, Transitions
from runplane.persistence import Store, Tx
from runplane.problems import FieldProblem, Problem
from runplane.runtime import ActorRef
from runplane.sealing import Sealer
from runplane.settings import Settings
from runplane.timefmt import iso_ms_or_none
from runplane.webhooks import deliveries, endpoints
from runplane.webhooks.endpoints import Endpoint

#: A create waits at most this long on DNS (conventions: no create waits longer than 5 s).
CREATE_RESOLVE_SEC = 5.0


def run_object(
    row: JobRow,
    state: JobState,
    metrics: Mapping[str, float],
    artifacts: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The payload's ``run``: the run as it ended."""
    return {
        "id": row.id,
        "org_id": row.org_id,
        "project": row.project,
        "stack": row.stack,
        "phase": state.phase.value,
        "created_at": iso_ms_or_none(row.created_at),
        "started_at": iso_ms_or_none(state.started_at),
        "finished_at": iso_ms_or_none(state.finished_at),
        "error": state.error or "",
        "metrics": dict(metrics),
        "artifacts": [dict(a) for a in artifacts],
    }


class Webhooks:
    def __init__(
        self,
        store: Store,
        settings: Settings,
        dispatcher: Callable[[], ActorRef[DispatchMsg]],
        sealer: Callable[[], Sealer],
    ) -> None:
        self.store = store
        self.settings = settings
        self.enabled = settings.area_enabled("webhooks")
        self.allow = egress.Allow.of(settings.egress_allow)
        self._dispatcher = dispatcher
        #: the server's sealer (the root's, made once the secret key is loaded)
        self.sealer = sealer
        #: orgs with at least one endpoint: only their runs queue deliveries
        self.orgs: set[str] = set()

    async def recover(self) -> None:
        self.orgs = await endpoints.orgs_with_endpoints(self.store)

    # -- from the job actors

    def follow(self, transitions: Transitions) -> None:
        """Queue a run's deliveries with its end, in its transaction; poke the dispatcher
        once it is stored."""
        transitions.in_tx(self.end_tx)
        transitions.subscribe(self.transitioned)

    def end_tx(self, moved: JobTransitioned) -> Callable[[Tx], Any] | None:
        """The part of the transaction ending a run that queues its deliveries (None: not
        an end, its org has no endpoint, or webhooks are switched off)."""
        row = moved.row
        if not moved.ends or not self.enabled or row.org_id not in self.orgs:
            return None
        event = deliveries.EVENT_OF.get(moved.phase.value)
        if event is None:
            return None
        run = run_object(row, moved.after, moved.final_metrics, moved.artifacts)
        return deliveries.fire(row.org_id, row.id, event, run)

    async def transitioned(self, moved: JobTransitioned) -> None:
        if moved.ends:
            await self.ended(moved.row.org_id)  # its deliveries were queued with its end

    async def poke(self) -> None:
        """New pending deliveries are stored (a commit status, a ping)."""
        await self._dispatcher().tell_now(Poke())

    async def ended(self, org_id: str) -> None:
        """A run of ``org_id`` ended (stored): its deliveries, if any, are due now."""
        if self.enabled and org_id in self.orgs:
            await self._dispatcher().tell_now(Poke())

    # -- from the routes

    async def create(
        self, body: endpoints.WebhookBody, *, caller_org: str | None, superuser: bool, by: str
    ) -> tuple[Endpoint, str]:
        """Checks in the conventions' order (the route did authentication): another org
        (403), the body (400), then the egress guard (400)."""
        if superuser and not body.org_id:
            message = "the admin token names the org_id whose runs the webhook receives"
            raise Problem(
                400, "missing_field", message, [FieldProblem("org_id", "missing", message)]
            )
        org = body.org_id or caller_org
        if org is None or (not superuser and org != caller_org):
            raise Problem(403, "forbidden", "cannot create a webhook for another org")
        url = endpoints.checked_url(body.url)
        events = endpoints.checked_events(body.events)
        try:
            await egress.check(url, self.allow, timeout=CREATE_RESOLVE_SEC)
        except egress.EgressRefused as exc:
            raise Problem(
                400, "egress_refused", str(exc), [FieldProblem("url", "refused", str(exc))]
            ) from None
        except egress.EgressUnreachable as exc:
            message = f"url: {exc}; check the host name"
            raise Problem(
                400, "invalid_field", message, [FieldProblem("url", "unresolvable", message)]
            ) from None
        endpoint, secret = endpoints.new_endpoint(
            self.sealer(), org_id=org, url=url, events=events, created_by=by
        )
        await endpoints.insert(self.store, endpoint)
        self.orgs.add(org)
        return endpoint, secret

    async def delete(self, endpoint: Endpoint) -> None:
        await endpoints.delete(self.store, endpoint)
        if not any(e.org_id == endpoint.org_id for e in await self.listing(endpoint.org_id)):
            self.orgs.discard(endpoint.org_id)

    async def listing(self, org_id: str | None) -> list[Endpoint]:
        return await endpoints.listing(self.store, org_id)

    async def ping(self, endpoint: Endpoint) -> str:
        delivery_id = await deliveries.queue_ping(self.store, endpoint.id, endpoint.org_id)
        await self.poke()
        return delivery_id

    async def endpoint(self, endpoint_id: str, org_id: str | None) -> Endpoint:
        """The endpoint (``org_id`` None: any org's); 404 when unknown or another org's."""
        return await endpoints.get(self.store, endpoint_id, org_id)

    async def deliveries(self, endpoint_id: str) -> list[deliveries.Delivery]:
        """The endpoint's recent deliveries, newest first."""
        return await deliveries.recent(self.store, endpoint_id)
