"""Stream tickets: short-lived, signed credentials for one stream of one job.

``POST /v1/jobs/{id}/streams/{name}/subscribe`` mints one; it authorizes ``GET .../data``
and ``POST .../teleop`` of that stream only (``?ticket=`` or as the bearer). A ticket is
``rpst_<payload>.<signature>``: the payload (base64url JSON) names the job, stream,
subscriber session, the job's org, whether its holder may send teleop frames (the minting
principal could submit runs), and the expiry; the signature is HMAC-SHA256 under a key
derived from the server's secret key. Nothing is stored: a ticket is checked by its
signature and expiry alone, and lives :data:`TICKET_TTL_SEC`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from runplane import signed

PREFIX = "rpst_"
#: How long a ticket is valid after it was minted.
TICKET_TTL_SEC = 60
_CONTEXT = b"runplane stream ticket v1"


class TicketInvalid(Exception):
    """The ticket is malformed, tampered with, expired, or for another job or stream."""


@dataclass(frozen=True, slots=True)
class Ticket:
    job_id: str
    stream: str
    session_id: str
    org_id: str
    teleop: bool
    expires: int  # unix seconds


def new_session_id() -> str:
    return "sub_" + secrets.token_hex(12)


def mint(secret_key: bytes, ticket: Ticket) -> str:
    payload = {
        "j": ticket.job_id,
        "s": ticket.stream,
        "ss": ticket.session_id,
        "o": ticket.org_id,
        "t": ticket.teleop,
        "e": ticket.expires,
    }
    return signed.sign(secret_key, _CONTEXT, PREFIX, payload)


def verify(secret_key: bytes, token: str, *, job_id: str, stream: str, now: float) -> Ticket:
    """The ticket's claims when ``token`` is a valid, unexpired ticket for ``job_id``'s
    ``stream``; :class:`TicketInvalid` (saying which) otherwise."""
    try:
        data = signed.claims_of(secret_key, _CONTEXT, PREFIX, token)
    except signed.SignatureInvalid as exc:
        if "kind" in str(exc):
            raise TicketInvalid("not a stream ticket") from None
        if "malformed" in str(exc):
            raise TicketInvalid("malformed stream ticket") from None
        raise TicketInvalid("stream ticket signature does not match") from None
    try:
        ticket = Ticket(
            job_id=str(data["j"]),
            stream=str(data["s"]),
            session_id=str(data["ss"]),
            org_id=str(data["o"]),
            teleop=bool(data["t"]),
            expires=int(data["e"]),
        )
    except (ValueError, KeyError, TypeError):
        raise TicketInvalid("malformed stream ticket") from None
    if ticket.expires <= now:
        raise TicketInvalid("stream ticket expired: subscribe again for a new one")
    if ticket.job_id != job_id or ticket.stream != stream:
        raise TicketInvalid("stream ticket is for another job or stream")
    return ticket


def looks_like_ticket(secret: str | None) -> bool:
    return bool(secret) and str(secret).startswith(PREFIX)
