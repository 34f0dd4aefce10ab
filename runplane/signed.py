"""Signed claims: short, self-contained credentials checked by signature alone.

``<prefix><base64url JSON claims>.<base64url HMAC-SHA256>``, the HMAC keyed with a key
derived from the server's secret key and a per-use ``context`` (a stream ticket cannot
pass for a git ticket). Nothing is stored; callers check expiry and scope in the claims.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

MAX_LEN = 2048


class SignatureInvalid(Exception):
    """Not a token of this kind, malformed, or tampered with."""


def _key(secret_key: bytes, context: bytes) -> bytes:
    return hmac.new(secret_key, context, hashlib.sha256).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(secret_key: bytes, context: bytes, prefix: str, claims: dict[str, Any]) -> str:
    body = _b64(json.dumps(claims, separators=(",", ":")).encode())
    sig = _b64(hmac.new(_key(secret_key, context), body.encode(), hashlib.sha256).digest())
    return f"{prefix}{body}.{sig}"


def claims_of(secret_key: bytes, context: bytes, prefix: str, token: str) -> dict[str, Any]:
    """The claims of a token signed with ``context``; :class:`SignatureInvalid` else."""
    if not token.startswith(prefix) or token.count(".") != 1 or len(token) > MAX_LEN:
        raise SignatureInvalid("not a token of this kind")
    body, _, sig = token[len(prefix) :].partition(".")
    want = hmac.new(_key(secret_key, context), body.encode(), hashlib.sha256).digest()
    try:
        given = _unb64(sig)
        data = json.loads(_unb64(body))
    except ValueError:
        raise SignatureInvalid("malformed token") from None
    if not hmac.compare_digest(given, want) or not isinstance(data, dict):
        raise SignatureInvalid("signature does not match")
    return data
