"""Why admission refuses work: a kind the HTTP layer maps to a status (429 for a quota),
and the exception a submit raises with it."""

from __future__ import annotations

from enum import StrEnum


class Refusal(StrEnum):
    """A refusal kind; its value is the problem ``code`` users see."""

    QUOTA_EXCEEDED = "quota_exceeded"


class AdmissionRefused(Exception):
    """Raised by a submit the gate refused; ``reason`` is the sentence users read."""

    def __init__(self, kind: Refusal, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
