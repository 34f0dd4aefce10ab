"""Store outages in HTTP terms, and the readiness probe (``GET /readyz``).

* A request that needs the store while it cannot be reached answers ``503
  store_unavailable`` with ``Retry-After`` (the store raises
  :class:`~runplane.persistence.StoreUnavailableError`, directly or as the cause of an
  actor's crash): nothing was done, the client retries.
* ``/readyz`` is 200 only when the store answers a trivial read and an empty write
  within :data:`READY_TIMEOUT_SEC`, the actor tree runs and (``RUNPLANE_HA=1``) this
  replica surely still leads; a follower's gate proxies ``/readyz`` to the leader
  (runplane/http/gate.py). ``/healthz`` stays the liveness probe: the process serves.

One probe of the store runs at a time, in the app's nursery: probes that arrive while it
runs wait for its answer (up to the timeout) instead of piling more work on a stalled
store. See docs/operations.md "Health and readiness".
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from runplane.persistence import Store, StoreUnavailableError
from runplane.persistence.errors import FencedError, WriteBatchError
from runplane.runtime.throttle import OnceEvery

log = logging.getLogger("runplane.http")

#: Seconds a client should wait before retrying a request the store could not serve.
STORE_RETRY_AFTER_SEC = 2
#: How long /readyz waits for the store's answer before it says the store is unavailable.
READY_TIMEOUT_SEC = 2.0
#: A failed store probe, or a request that met an outage, is logged at most once per this
#: many seconds (a load balancer probes every few seconds for as long as the outage lasts).
LOG_INTERVAL_SEC = 10.0

STORE_UNAVAILABLE_DETAIL = (
    "the store (database) cannot be reached right now, so nothing was done; "
    "retry after the Retry-After delay"
)


#: logs of requests that met a store outage (one line per interval, with the count)
request_outage_log = OnceEvery(LOG_INTERVAL_SEC)


def log_request_outage(error: StoreUnavailableError, method: str, path: str) -> None:
    if request_outage_log():
        log.warning(
            "store unavailable",
            extra={
                "error": str(error),
                "method": method,
                "path": path,
                "also_refused": request_outage_log.take_suppressed(),
            },
        )


#: logs of requests refused for a full store disk (one line per interval, with the count)
request_full_log = OnceEvery(LOG_INTERVAL_SEC)


def log_request_full(error: Exception, method: str, path: str) -> None:
    if request_full_log():
        log.warning(
            "store disk full",
            extra={
                "error": str(error),
                "method": method,
                "path": path,
                "also_refused": request_full_log.take_suppressed(),
            },
        )


class Readiness:
    """The readiness probe's state: at most one store probe in flight, its last answer."""

    def __init__(
        self,
        store: Store,
        nursery: trio.Nursery,
        *,
        tree_running: Callable[[], bool],
        leading: Callable[[], bool] | None = None,
        timeout: float = READY_TIMEOUT_SEC,
    ) -> None:
        self._store = store
        self._nursery = nursery
        self._tree_running = tree_running
        self._leading = leading
        self._timeout = timeout
        self._probe: trio.Event | None = None
        self._answer: tuple[str, str] | None = None
        self._log = OnceEvery(LOG_INTERVAL_SEC)

    async def reason(self) -> tuple[str, str] | None:
        """None when ready, else ``(code, detail)`` of the 503."""
        if not self._tree_running():
            return "not_ready", "the actor tree is not running (starting or stopping)"
        if self._leading is not None and not self._leading():
            return "not_leader", "this replica's leader lease is not sure to run"
        done = self._probe
        if done is None:
            done = self._probe = trio.Event()
            self._nursery.start_soon(self._run_probe, done)
        with trio.move_on_after(self._timeout):
            await done.wait()
        if not done.is_set():
            return "store_unavailable", (
                f"the store did not answer a trivial query within {self._timeout:g} s"
            )
        return self._answer

    async def _run_probe(self, done: trio.Event) -> None:
        try:
            await self._store.ping()
            self._answer = None
        except StoreUnavailableError as exc:
            self._answer = "store_unavailable", str(exc)
        except WriteBatchError as exc:
            fenced = isinstance(exc.cause, FencedError)
            self._answer = ("not_leader" if fenced else "not_ready"), str(exc)
        except Exception as exc:  # a probe must never take the server down
            self._answer = "not_ready", f"the store probe failed: {exc!r}"
        finally:
            self._probe = None
            done.set()
        if self._answer is not None and self._log():
            log.warning("not ready", extra={"code": self._answer[0], "error": self._answer[1]})
