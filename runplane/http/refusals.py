"""Domain refusals as HTTP: the one place a refusal kind becomes a status."""

from __future__ import annotations

from runplane.policy.refusal import AdmissionRefused, Refusal
from runplane.problems import Problem

#: Status per admission refusal kind (a quota is "too many requests": retry later).
REFUSAL_STATUS: dict[Refusal, int] = {Refusal.QUOTA_EXCEEDED: 429}


def refusal_status(kind: Refusal | None) -> int:
    """The status a refusal answers with (0: not refused, as preflight reports it)."""
    return 0 if kind is None else REFUSAL_STATUS[kind]


def refusal_problem(exc: AdmissionRefused) -> Problem:
    return Problem(refusal_status(exc.kind), exc.kind.value, exc.reason)
