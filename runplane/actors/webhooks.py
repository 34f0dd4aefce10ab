"""The webhook dispatcher: attempts pending deliveries, with retries, never blocking on one.

It keeps the pending deliveries due (id, endpoint, when) in a heap, rebuilt from the store
when it (re)starts, and learns of new ones by a ``Poke`` (a run of an org with endpoints
ended, or a test ping): it then reads the pending rows newer than the last it knows, at
most once per ``reload_delay``. Each attempt runs as its own task: at most
``per_endpoint`` at once per endpoint (the others of that endpoint wait their turn
without holding a slot) and ``overall`` in all, so a slow or dead receiver delays only its
own deliveries. An attempt re-reads its row, checks the URL with the egress guard,
signs, POSTs, and writes the outcome (``runplane/webhooks/deliveries.py`` ``record``)
before it reports ``Attempted`` with the delay to the next try, if any
(``runplane/webhooks/schedule.py``). Commit statuses for git connections
(``runplane/git/statuses.py``) ride the same rows and retries, one at a time per
connection, each sent as the job is when it goes. Scheduling runs on trio's clock (tests
drive it); the due times written to the store (wall ms) matter after a restart.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import logging
import random
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import assert_never

import trio

from runplane import egress, outbound
from runplane.git import connections, statuses
from runplane.git.connections import CONNECTION_PREFIX
from runplane.jobs import repo as jobs_repo
from runplane.persistence import Store, now_ms
from runplane.runtime import Actor, ActorError, clock
from runplane.sealing import Sealer, SealError
from runplane.timefmt import iso_ms
from runplane.webhooks import deliveries, endpoints, schedule, signing
from runplane.webhooks.deliveries import DELIVERED, FAILED, GIT_STATUS, PENDING, Delivery

log = logging.getLogger("runplane.webhooks")

PER_ENDPOINT = 4
OVERALL = 64
RELOAD_DELAY_SEC = 0.01


@dataclass(frozen=True, slots=True)
class Poke:
    """New pending deliveries may be in the store."""


@dataclass(frozen=True, slots=True)
class Reload:
    """Read the new pending deliveries (sent to self)."""


@dataclass(frozen=True, slots=True)
class Tick:
    """A delivery may be due (sent to self)."""


@dataclass(frozen=True, slots=True)
class Attempted:
    """An attempt of ``delivery_id`` ended; ``retry_in`` seconds to the next (None: the
    delivery is over: delivered, failed, or gone)."""

    delivery_id: str
    endpoint_id: str
    retry_in: float | None


DispatchMsg = Poke | Reload | Tick | Attempted


@dataclass(frozen=True, slots=True)
class Call:
    """One attempt's request."""

    url: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass(slots=True)
class DispatchDeps:
    store: Store
    #: the sealer of the endpoints' secrets (read when first needed: the server's key)
    sealer: Callable[[], Sealer]
    allow: egress.Allow
    per_endpoint: int = PER_ENDPOINT
    overall: int = OVERALL
    reload_delay: float = RELOAD_DELAY_SEC
    #: False (RUNPLANE_DISABLE=webhooks): no webhook is attempted, pending ones wait in the
    #: store (commit statuses still go)
    enabled: bool = True
    rng: random.Random = field(default_factory=random.Random)


@dataclass(slots=True)
class DispatchStats:
    attempts: int = 0
    delivered: int = 0
    failed: int = 0


class WebhookDispatcher(Actor[DispatchMsg]):
    def __init__(self, deps: DispatchDeps) -> None:
        self.deps = deps
        self._due: list[tuple[float, str, str]] = []  # (trio time, delivery id, endpoint id)
        self._known: set[str] = set()  # in the heap, waiting or in flight
        self._waiting: dict[str, deque[str]] = {}  # endpoint -> due ids over its limit
        self._busy: Counter[str] = Counter()  # endpoint -> attempts in flight
        self._inflight = 0
        self._high: str | None = None  # the newest delivery id read
        self._reloading = False
        self._tick_at: float | None = None
        self.stats = DispatchStats()

    async def on_start(self) -> None:
        await self._read(None)

    async def handle(self, msg: DispatchMsg) -> None:
        match msg:
            case Poke():
                if not self._reloading:
                    self._reloading = True
                    self.context.tell_after(self.deps.reload_delay, Reload())
            case Reload():
                self._reloading = False
                await self._read(self._high)
            case Tick():
                self._tick_at = None
                self._pump()
            case Attempted(delivery_id, endpoint_id, retry_in):
                self._inflight -= 1
                self._busy[endpoint_id] -= 1
                waiting = self._waiting.get(endpoint_id)
                if waiting:
                    heapq.heappush(self._due, (trio.current_time(), waiting.popleft(), endpoint_id))
                if retry_in is None:
                    self._known.discard(delivery_id)
                else:
                    due = trio.current_time() + retry_in
                    heapq.heappush(self._due, (due, delivery_id, endpoint_id))
                self._pump()
            case _:
                assert_never(msg)

    async def _read(self, after: str | None) -> None:
        rows = await deliveries.pending(self.deps.store, after_id=after)
        now, wall = trio.current_time(), now_ms()
        for due in rows:
            if not self.deps.enabled and not due.endpoint_id.startswith(CONNECTION_PREFIX):
                continue  # webhooks are switched off: it waits in the store
            if due.id not in self._known:
                self._known.add(due.id)
                at = now + max(0.0, (due.next_at - wall) / 1000)
                heapq.heappush(self._due, (at, due.id, due.endpoint_id))
            if self._high is None or due.id > self._high:
                self._high = due.id
        self._pump()

    def _pump(self) -> None:
        """Start the due attempts the limits allow; wake up when the next one is due."""
        now = trio.current_time()
        due = self._due
        while due and due[0][0] <= now and self._inflight < self.deps.overall:
            _, delivery_id, endpoint_id = heapq.heappop(due)
            if self._busy[endpoint_id] >= self._limit(endpoint_id):
                self._waiting.setdefault(endpoint_id, deque()).append(delivery_id)
                continue
            self._busy[endpoint_id] += 1
            self._inflight += 1
            self.context.start_soon(self._attempt, delivery_id, endpoint_id)
        if due and self._inflight < self.deps.overall:
            at = due[0][0]
            if self._tick_at is None or at < self._tick_at:
                self._tick_at = at
                self.context.tell_after(max(0.0, at - now), Tick())

    def _limit(self, endpoint_id: str) -> int:
        """Attempts at once per target: one per git connection (a job's statuses then
        reach the provider in order), ``per_endpoint`` per webhook endpoint."""
        return 1 if endpoint_id.startswith(CONNECTION_PREFIX) else self.deps.per_endpoint

    async def _attempt(self, delivery_id: str, endpoint_id: str) -> None:
        retry_in: float | None = None
        try:
            retry_in = await self._deliver(delivery_id)
        except Exception:  # a bug, or the store failing: try again later, loudly
            log.exception("webhook attempt crashed", extra={"delivery_id": delivery_id})
            retry_in = 60.0
        # stopping: the row says what is left, the next start picks it up
        with contextlib.suppress(ActorError):
            await self.context.ref.tell(Attempted(delivery_id, endpoint_id, retry_in))

    async def _deliver(self, delivery_id: str) -> float | None:
        """One attempt; the delay to the next one (None: the delivery is over)."""
        store = self.deps.store
        delivery = await deliveries.get(store, delivery_id)
        if delivery is None or delivery.status != PENDING:
            return None  # deleted with its endpoint, or already over
        self.stats.attempts += 1
        attempts = delivery.attempts + 1
        code, retry_after = 0, None
        try:
            call = await self._prepare(delivery)
            if call is None:
                return None  # its endpoint or connection is gone
            target, addresses = await egress.check(call.url, self.deps.allow)
            answer = await outbound.request(
                "POST",
                target,
                addresses,
                headers=call.headers,
                body=call.body,
                within=schedule.ATTEMPT_TIMEOUT_SEC,
            )
        except (egress.EgressRefused, egress.BadUrl, SealError) as exc:
            await self._over(delivery, attempts, FAILED, 0, f"not sent: {exc}")
            return None
        except (egress.EgressUnreachable, outbound.SendError) as exc:
            error = str(exc)
        else:
            code = answer.status
            if 200 <= code < 300:
                await self._over(delivery, attempts, DELIVERED, code, "")
                return None
            error = f"HTTP {code}"
            snippet = answer.body[:200].decode("utf-8", "replace").strip()
            if snippet:
                error += f": {snippet}"
            if not schedule.retryable(code):
                await self._over(delivery, attempts, FAILED, code, error)
                return None
            retry_after = schedule.parse_retry_after(
                answer.headers.get("retry-after"), clock.wall()
            )
        return await self._retry_later(delivery, attempts, code, error, retry_after)

    async def _retry_later(
        self, delivery: Delivery, attempts: int, code: int, error: str, retry_after: float | None
    ) -> float | None:
        """A failed attempt that may be retried: its next time (backoff, or the receiver's
        ``Retry-After``) recorded, and the delay returned; over after the last attempt."""
        delay = schedule.next_delay(attempts, retry_after, self.deps.rng)
        if delay is None:
            error = f"gave up after {attempts} attempts; last: {error}"
            await self._over(delivery, attempts, FAILED, code, error)
            return None
        await deliveries.record(
            self.deps.store,
            delivery.id,
            status=PENDING,
            attempts=attempts,
            response_code=code,
            error=error,
            next_at=now_ms() + int(delay * 1000),
        )
        log.info(
            "webhook attempt failed, will retry",
            extra={
                "delivery_id": delivery.id,
                "endpoint_id": delivery.endpoint_id,
                "attempt": attempts,
                "response_code": code,
                "error": error[:300],
                "retry_in_sec": round(delay, 3),
            },
        )
        return delay

    async def _prepare(self, delivery: Delivery) -> Call | None:
        """The request of this attempt: a signed webhook message, or a commit status in
        its provider's shape (sent as the job is now); None when its target is gone."""
        store = self.deps.store
        if delivery.kind == GIT_STATUS:
            conn = await connections.find(store, delivery.endpoint_id)
            job = await jobs_repo.get_row(store, delivery.job_id or "", None)
            if conn is None or job is None:
                return None
            detail = json.loads(delivery.run or "{}")
            phase = job.phase.value
            status = statuses.call(
                conn.provider,
                conn.base_url,
                conn.repo_url,
                conn.credential(self.deps.sealer()),
                commit=detail["commit"],
                state=statuses.STATE_OF.get(phase, delivery.event),
                target_url=detail.get("target_url", ""),
                text=statuses.description(phase, job.error or ""),
            )
            return Call(status.url, status.headers, status.body)
        endpoint = await endpoints.find(store, delivery.endpoint_id)
        if endpoint is None:
            return None
        secret = endpoint.secret(self.deps.sealer())
        body = payload(delivery)
        heads = [("Content-Type", "application/json")]
        heads += signing.headers(secret, delivery.id, delivery.event, int(clock.wall()), body)
        return Call(endpoint.url, heads, body)

    async def _over(
        self, delivery: Delivery, attempts: int, status: str, code: int, error: str
    ) -> None:
        """The delivery is over: ``status`` delivered or failed."""
        await deliveries.record(
            self.deps.store,
            delivery.id,
            status=status,
            attempts=attempts,
            response_code=code,
            error=error,
            next_at=None,
        )
        if status == DELIVERED:
            self.stats.delivered += 1
        else:
            self.stats.failed += 1
        log.log(
            logging.INFO if status == DELIVERED else logging.WARNING,
            f"webhook {status}",
            extra={
                "delivery_id": delivery.id,
                "endpoint_id": delivery.endpoint_id,
                "event": delivery.event,
                "attempt": attempts,
                "response_code": code,
                "error": error[:300],
            },
        )
        return None


def payload(delivery: Delivery) -> bytes:
    """The WebhookPayload body (the same bytes on every attempt of a delivery)."""
    body = {
        "event": delivery.event,
        "delivery_id": delivery.id,
        "created_at": iso_ms(delivery.created_at),
        "run": json.loads(delivery.run) if delivery.run else None,
    }
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode("utf-8")
