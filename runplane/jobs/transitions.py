"""What a job's stored transition tells the rest of the system: one typed event,
:class:`JobTransitioned`, and its registry, :class:`Transitions`.

The job actor (``runplane/actors/job.py``) knows none of the services that follow a job.
Each registers here where it is built (``Root._wire``, the services' ``register``):

- ``in_tx(part)``: ``part(event)`` returns a function run inside the transaction that
  stores the transition (or None): it commits with the row or not at all (the run's
  webhook deliveries, a commit status). One that raises rolls the transition back.
- ``subscribe(fn)``: ``await fn(event)`` after the transition is stored and published, in
  the order subscribed (admission's ledger first: a slot is free before placement sees the
  capacity the transition's effects release). One that raises is logged and skipped: a
  follower's failure never breaks the job's actor.

Subscribers see every stored transition once, including one that keeps the phase (a retry's
backoff ending); ``changed`` and ``ends`` say what kind it was.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runplane.jobs.phase import JobState, Phase
from runplane.jobs.rows import JobRow
from runplane.persistence import Tx

log = logging.getLogger("runplane.jobs")

#: A part of the transition's transaction (runs with the transaction's ``Tx``).
TxPart = Callable[[Tx], Any]


@dataclass(frozen=True, slots=True)
class JobTransitioned:
    """A job's phase machine moved ``before`` -> ``after`` (stored with ``row``'s id)."""

    #: the job's row as its actor holds it (spec, org, pipeline and session links, GPUs)
    row: JobRow
    before: JobState
    after: JobState
    #: the metrics of the try as stored with the transition
    final_metrics: Mapping[str, float] = field(default_factory=dict)
    #: the ArtifactRefs the run ends with (a terminal transition's)
    artifacts: Sequence[Mapping[str, Any]] = ()

    @property
    def job_id(self) -> str:
        return self.row.id

    @property
    def phase(self) -> Phase:
        return self.after.phase

    @property
    def error(self) -> str | None:
        return self.after.error

    @property
    def changed(self) -> bool:
        """The phase changed (not a retry's backoff ending in the queue)."""
        return self.after.phase is not self.before.phase

    @property
    def ends(self) -> bool:
        """The transition ends the job (it was not terminal before)."""
        return self.after.phase.terminal and not self.before.phase.terminal


#: What a subscriber is: called after the transition is stored.
Subscriber = Callable[[JobTransitioned], Awaitable[None]]
#: What an in-transaction part is: the function to run in the transaction, or None.
InTx = Callable[[JobTransitioned], TxPart | None]


class Transitions:
    """Who follows job transitions: the in-transaction parts, then the subscribers."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        self._in_tx: list[InTx] = []

    def subscribe(self, fn: Subscriber) -> None:
        """``await fn(event)`` after each stored transition, in the order subscribed."""
        self._subscribers.append(fn)

    def in_tx(self, part: InTx) -> None:
        """Run ``part(event)``'s function (if any) in each transition's transaction."""
        self._in_tx.append(part)

    def tx_part(self, event: JobTransitioned) -> TxPart | None:
        """The in-transaction parts for ``event`` as one function (None: no part)."""
        parts = [fn for fn in (part(event) for part in self._in_tx) if fn is not None]
        if not parts:
            return None

        def run(tx: Tx) -> None:
            for fn in parts:
                fn(tx)

        return run

    async def published(self, event: JobTransitioned) -> None:
        """Tell every subscriber; one that raises is logged, the others still hear it."""
        for fn in self._subscribers:
            try:
                await fn(event)
            except Exception as exc:
                log.exception(
                    "job transition subscriber failed",
                    extra={
                        "job_id": event.job_id,
                        "to": event.phase.value,
                        "subscriber": getattr(fn, "__qualname__", repr(fn)),
                        "error": str(exc),
                    },
                )
