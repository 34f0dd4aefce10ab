"""Git fetch tickets: the short-lived credential an agent clones a connection's
repository with, through the server (docs/git.md#jobs-from-a-connection).

A ticket names one attempt of one job and one connection, and expires
:data:`TICKET_TTL_SEC` after it was minted into the run order (a clone's requests start
within it; a transfer in progress is not cut). The server's git proxy also checks that
the attempt is still the job's current one and not over: a ticket of a finished or
requeued attempt opens nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from runplane import signed

PREFIX = "rpgt_"
TICKET_TTL_SEC = 900
_CONTEXT = b"runplane git fetch ticket v1"


class TicketInvalid(Exception):
    """Malformed, tampered with, expired, or for another connection."""


@dataclass(frozen=True, slots=True)
class Ticket:
    job_id: str
    attempt: int
    connection_id: str
    expires: int  # unix seconds


def mint(secret_key: bytes, ticket: Ticket) -> str:
    claims = {
        "j": ticket.job_id,
        "a": ticket.attempt,
        "c": ticket.connection_id,
        "e": ticket.expires,
    }
    return signed.sign(secret_key, _CONTEXT, PREFIX, claims)


def verify(secret_key: bytes, token: str, *, connection_id: str, now: float) -> Ticket:
    try:
        data = signed.claims_of(secret_key, _CONTEXT, PREFIX, token)
        ticket = Ticket(str(data["j"]), int(data["a"]), str(data["c"]), int(data["e"]))
    except (signed.SignatureInvalid, KeyError, TypeError, ValueError):
        raise TicketInvalid("not a valid git fetch ticket") from None
    if ticket.expires <= now:
        raise TicketInvalid("git fetch ticket expired")
    if ticket.connection_id != connection_id:
        raise TicketInvalid("git fetch ticket is for another connection")
    return ticket
