"""What an exception a route raised is answered with: the problem for each kind, in one
place for both lanes (Quart's error handlers in ``app.py`` and the lean lanes,
docs/lean-lanes.md). Nothing here reads Quart's request context: the request's id,
method and path come in a :class:`Where`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from quart import Response

from runplane.artifacts import StoreFull as ArtifactStoreFull
from runplane.http.problems import problem_response
from runplane.http.readiness import (
    STORE_RETRY_AFTER_SEC,
    STORE_UNAVAILABLE_DETAIL,
    log_request_full,
    log_request_outage,
)
from runplane.http.refusals import refusal_problem
from runplane.persistence.errors import (
    FencedError,
    StoreFullError,
    StoreUnavailableError,
    WriteBatchError,
    store_full,
    store_outage,
)
from runplane.policy.refusal import AdmissionRefused
from runplane.problems import Problem
from runplane.runtime import AskTimeout, MailboxFull

log = logging.getLogger("runplane.http")

#: Seconds a client should wait before retrying a request the server was too busy for.
OVERLOAD_RETRY_AFTER_SEC = 1


@dataclass(frozen=True, slots=True)
class Where:
    """The request an exception ended: its id (``X-Request-ID``), method and path, and
    whether this replica's lease (HA) surely still runs (None: not a replica)."""

    request_id: str | None
    method: str
    path: str
    leading: Callable[[], bool] | None = None


def answer_problem(exc: Problem, where: Where) -> Response:
    return problem_response(
        exc.status,
        exc.code,
        exc.detail,
        request_id=where.request_id,
        errors=exc.errors,
        headers=exc.headers,
    )


def answer_refused(exc: AdmissionRefused, where: Where) -> Response:
    return answer_problem(refusal_problem(exc), where)


def answer_overload(exc: MailboxFull | AskTimeout, where: Where) -> Response:
    """An actor's mailbox was full, or it did not answer in time: the server is busy, not
    broken. 503 with Retry-After, so clients back off and retry."""
    log.warning("overloaded", extra={"error": str(exc), "kind": type(exc).__name__})
    return problem_response(
        503,
        "overloaded",
        "the server is busy right now; retry after the Retry-After delay",
        request_id=where.request_id,
        headers={"Retry-After": str(OVERLOAD_RETRY_AFTER_SEC)},
    )


def answer_store_unavailable(exc: StoreUnavailableError, where: Where) -> Response:
    """The store cannot be reached (runplane/http/readiness.py): 503 with Retry-After,
    nothing was done, the client retries. Logged once per interval, not per request."""
    log_request_outage(exc, where.method, where.path)
    return problem_response(
        503,
        "store_unavailable",
        STORE_UNAVAILABLE_DETAIL,
        request_id=where.request_id,
        headers={"Retry-After": str(STORE_RETRY_AFTER_SEC)},
    )


def answer_store_full(exc: StoreFullError | ArtifactStoreFull, where: Where) -> Response:
    """The store's disk (or the artifact store's) is full (docs/operations.md "Full
    disks"): 507, nothing was written, the detail names what is full; reads keep being
    served. Logged once per interval, not per request."""
    log_request_full(exc, where.method, where.path)
    return problem_response(507, "insufficient_storage", str(exc), request_id=where.request_id)


def answer_write_failed(exc: WriteBatchError, where: Where) -> Response:
    """A write that did not commit. Fenced (``RUNPLANE_HA=1``: another replica took the
    lease): 503, nothing was done, the client retries and reaches the new leader. The
    store unreachable: 503 ``store_unavailable``."""
    if isinstance(exc, StoreUnavailableError):
        return answer_store_unavailable(exc, where)
    if isinstance(exc, StoreFullError):
        return answer_store_full(exc, where)
    if isinstance(exc.cause, FencedError):
        return not_leader("this replica no longer leads, so nothing was written", where)
    return answer_unexpected(exc, where)


def not_leader(why: str, where: Where) -> Response:
    return problem_response(
        503,
        "not_leader",
        f"{why}; retry (the new leader answers)",
        request_id=where.request_id,
        headers={"Retry-After": str(OVERLOAD_RETRY_AFTER_SEC)},
    )


def answer_unexpected(exc: Exception, where: Where) -> Response:
    outage = store_outage(exc)  # e.g. an actor that crashed on the store's outage
    if outage is not None:
        return answer_store_unavailable(outage, where)
    full = store_full(exc)  # ... or on its full disk
    if full is not None:
        return answer_store_full(full, where)
    if where.leading is not None and not where.leading():
        # the actor tree of a replica that lost its lease is torn down under the request
        # (an actor stopped, a mailbox closed): no bug, and the gate cuts this answer
        log.warning("request cut by a lost lease", extra={"error": repr(exc)})
        return not_leader("this replica lost its lease while answering", where)
    log.error(
        "unhandled error",
        exc_info=exc,
        extra={"request_id": where.request_id, "method": where.method, "path": where.path},
    )
    return problem_response(
        500,
        "internal_error",
        "the server hit an unexpected error; quote the request_id when reporting it",
        request_id=where.request_id,
    )


#: Each kind of exception and its answer. Quart picks a handler by the exception's MRO;
#: :func:`answer` does the same, so both lanes answer alike.
ANSWERS: dict[type[Exception], Callable[[Any, Where], Response]] = {
    Problem: answer_problem,
    AdmissionRefused: answer_refused,
    MailboxFull: answer_overload,
    AskTimeout: answer_overload,
    WriteBatchError: answer_write_failed,
    StoreUnavailableError: answer_store_unavailable,
    StoreFullError: answer_store_full,
    ArtifactStoreFull: answer_store_full,
    Exception: answer_unexpected,
}


def answer(exc: Exception, where: Where) -> Response:
    """The answer to ``exc``: the handler of the nearest class in its MRO, as Quart's."""
    for kind in type(exc).__mro__:
        handler = ANSWERS.get(kind)
        if handler is not None:
            return handler(exc, where)
    return answer_unexpected(exc, where)


def quart_handler(where: Callable[[], Where]) -> Callable[[Exception], Awaitable[Response]]:
    """Quart's error handler for every kind in :data:`ANSWERS`: ``where`` reads the
    current request."""

    async def handle(exc: Exception) -> Response:
        return answer(exc, where())

    return handle
