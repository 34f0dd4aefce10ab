"""Per-credential request rate limits (``RUNPLANE_RATE_LIMIT``, ``_ADDRESS``): token buckets
in this process's memory, on trio's clock (docs/operations.md "Rate limits").

A request is counted against one bucket: its access token's (by id, ``tok_...``) or its
login session's (``lgs_...``); the source address's for a request without a valid
credential, and for logins and node enrollments whatever they present. The operator's
admin token is not limited. Probes, the UI's pages and assets, and the agents' own HTTP
traffic (artifact uploads and downloads, git fetches) are not counted; an SSE stream or
the agents' WebSocket is one request when it opens, its frames are not counted.

Over the limit: 429 ``rate_limited`` with ``Retry-After`` in whole seconds. Each HA
replica counts its own requests (a follower relays to the leader, which counts them under
the follower's address when they carry no credential).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import trio

from runplane.auth.principal import Principal
from runplane.problems import Problem
from runplane.settings import RateLimit, Settings

#: Buckets each kind keeps at most; past it the least recently used is dropped (it comes
#: back full, which a bucket idle that long would be anyway).
MAX_BUCKETS = 100_000
#: Route endpoints never counted: probes, the UI's pages and assets, the agents' traffic.
EXEMPT_BLUEPRINTS = frozenset({"health", "ui"})
EXEMPT_ENDPOINTS = frozenset(
    {
        "static",
        "artifacts.put_artifact",
        "artifacts.get_artifact",
        "git.proxy_refs",
        "git.proxy_upload_pack",
    }
)
#: Routes counted by source address whatever credential they carry: logins.
BY_ADDRESS = frozenset({"auth.exchange"})
#: The close code of an agent's enrollment refused for its rate (the agent retries).
CLOSE_RATE_LIMITED = 4429
_EPSILON = 1e-9
#: ``app.extensions`` key of the app's :class:`Limiter` (absent: nothing is limited)
EXTENSION = "runplane.ratelimit"


class Buckets:
    """Token buckets by key, all of one shape. ``take(key, now)`` spends one token and
    answers 0.0, or answers the seconds until one is there (spending nothing). Keys are
    kept in least-recently-used order: idle ones (full again) are dropped from the front
    as it goes, so memory stays bounded by the keys active within one refill time."""

    def __init__(self, limit: RateLimit, max_buckets: int = MAX_BUCKETS) -> None:
        self.rate = limit.per_sec
        self.burst = float(limit.burst)
        self.max_buckets = max_buckets
        #: key -> (tokens left, when they were counted)
        self._buckets: dict[str, tuple[float, float]] = {}

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: str, now: float) -> float:
        tokens, then = self._buckets.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        wait = 0.0
        if tokens >= 1.0 - _EPSILON:  # a whole token, give or take the clock's rounding
            tokens = max(0.0, tokens - 1.0)
        else:
            wait = (1.0 - tokens) / self.rate
        self._buckets[key] = (tokens, now)  # to the back: the most recently used
        self._evict(now)
        return wait

    def _evict(self, now: float) -> None:
        buckets = self._buckets
        while buckets:
            oldest = next(iter(buckets))
            tokens, then = buckets[oldest]
            full = tokens + (now - then) * self.rate >= self.burst
            if not full and len(buckets) <= self.max_buckets:
                return
            del buckets[oldest]


@dataclass(frozen=True, slots=True)
class Limiter:
    """The app's limits: per credential and per address (None where off)."""

    credential: Buckets | None
    address: Buckets | None

    @classmethod
    def of(cls, settings: Settings) -> Limiter | None:
        credential, address = settings.rate_limits()
        if credential is None and address is None:
            return None
        return cls(
            Buckets(credential) if credential is not None else None,
            Buckets(address) if address is not None else None,
        )

    def check(self, endpoint: str, principal: Principal, remote: str | None) -> None:
        """Count one request to ``endpoint``; raise the 429 when its bucket is empty."""
        if not counted(endpoint) or principal.credential == "admin":
            return
        if principal.credential_id is not None and endpoint not in BY_ADDRESS:
            buckets, key = self.credential, f"{principal.credential} {principal.credential_id}"
            what, setting = key, "RUNPLANE_RATE_LIMIT"
        else:
            buckets, key = self.address, remote or "unknown"
            what = f"address {remote}" if remote else "this client's address"
            setting = "RUNPLANE_RATE_LIMIT_ADDRESS"
        if buckets is not None:
            wait = buckets.take(key, trio.current_time())
            if wait > 0.0:
                raise rate_limited(what, setting, wait)

    def enrollment(self, remote: str | None) -> float:
        """Count one node enrollment from ``remote``: 0.0, or the seconds to wait."""
        if self.address is None:
            return 0.0
        return self.address.take(remote or "unknown", trio.current_time())


def counted(endpoint: str) -> bool:
    """Whether requests to the route ``endpoint`` are counted at all."""
    return endpoint not in EXEMPT_ENDPOINTS and endpoint.partition(".")[0] not in EXEMPT_BLUEPRINTS


def retry_after(wait: float) -> int:
    """``Retry-After`` in whole seconds: at least 1, rounded up."""
    return max(1, math.ceil(wait))


def rate_limited(what: str, setting: str, wait: float) -> Problem:
    """The 429 of a request over its bucket's limit (``setting`` names the limit)."""
    seconds = retry_after(wait)
    return Problem(
        429,
        "rate_limited",
        f"too many requests from {what}: over its rate limit ({setting}); "
        f"nothing was done, retry after {seconds} s",
        headers={"Retry-After": str(seconds)},
    )


def limiter_of(extensions: Mapping[str, object]) -> Limiter | None:
    found = extensions.get(EXTENSION)
    return found if isinstance(found, Limiter) else None
