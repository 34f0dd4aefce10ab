"""Identifiers and bearer secrets: one place that mints them, hashes them and compares them.

Ids are a prefix plus a sortable random part (``job_``, ``node_``, ``jt_``, ...; see the
conventions): 26 lowercase Crockford base32 characters, ULID-like::

    job_01jd8x3k2m7f4q9w5e6r8t0yzb
        ^^^^^^^^^^                      10 chars: unix milliseconds (48 bits)
                  ^^^^^^^^^^^^^^^^      16 chars: 80 bits from ``secrets``

Ids minted later sort after earlier ones (plain string order, same prefix). Within one
process this holds even inside one millisecond and when the wall clock steps back: the
generator is monotonic (like ULID's monotonic mode, the random part of the previous id is
incremented by one instead of drawn afresh while the clock has not moved past the last id's
millisecond; after a step back, ids carry the last millisecond seen until the clock catches
up). Across processes, ids are ordered by their millisecond; two processes minting in the
same millisecond order their ids at random. The time part reads :func:`runtime.clock.wall`,
so tests can pin it.

Secrets are a prefix plus 32 random bytes, URL-safe base64 (``rpj_`` join token, ``rpn_``
node credential, ...). They are stored only as :func:`hash_secret` (hex SHA-256) and
compared with :func:`secrets_equal` (constant time).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading

from runplane.runtime import clock

#: Crockford's base32 alphabet, lowercase (no i, l, o, u): sorts like the numbers it encodes.
ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
TIME_CHARS = 10
RANDOM_CHARS = 16
ID_BODY_CHARS = TIME_CHARS + RANDOM_CHARS
SECRET_BYTES = 32

_TIME_MAX = (1 << (5 * TIME_CHARS)) - 1
_RANDOM_BITS = 5 * RANDOM_CHARS
_RANDOM_MAX = (1 << _RANDOM_BITS) - 1
_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]*_$")
_BODY_RE = re.compile(rf"^[{ALPHABET}]{{{ID_BODY_CHARS}}}$")
_DECODE = {c: i for i, c in enumerate(ALPHABET)}

#: ``org_`` + lowercase letters, digits, ``_`` or ``-`` (minted org ids and ``org_default``).
ORG_ID_PATTERN = r"^org_[a-z0-9_-]{1,64}$"
_ORG_ID_RE = re.compile(ORG_ID_PATTERN)

_lock = threading.Lock()
_last_ms = -1
_last_random = 0


def _check_prefix(prefix: str) -> None:
    if not _PREFIX_RE.match(prefix):
        raise ValueError(
            f"id/secret prefix {prefix!r} is not lowercase letters/digits ending in '_' "
            "(e.g. 'job_')"
        )


def _encode(value: int, width: int) -> str:
    chars = []
    for _ in range(width):
        value, digit = divmod(value, 32)
        chars.append(ALPHABET[digit])
    return "".join(reversed(chars))


def _next_parts(ms: int) -> tuple[int, int]:
    """(millisecond, random part) of the next id: monotonic within this process."""
    global _last_ms, _last_random
    with _lock:
        if ms > _last_ms:
            _last_ms, _last_random = ms, secrets.randbits(_RANDOM_BITS)
        elif _last_random < _RANDOM_MAX:
            _last_random += 1  # same millisecond, or the clock stepped back: stay ordered
        else:  # 2**80 ids in one millisecond cannot happen; move to the next one anyway
            _last_ms, _last_random = _last_ms + 1, secrets.randbits(_RANDOM_BITS)
        return _last_ms, _last_random


def new_id(prefix: str) -> str:
    """A new id ``prefix + 26 chars`` that sorts after every id this process minted before."""
    _check_prefix(prefix)
    ms = min(max(int(clock.wall() * 1000), 0), _TIME_MAX)
    ms, rand = _next_parts(ms)
    return prefix + _encode(ms, TIME_CHARS) + _encode(rand, RANDOM_CHARS)


def derived_id(prefix: str, ms: int, key: str) -> str:
    """An id shaped like :func:`new_id`'s whose parts are fixed by ``(ms, key)``: the same
    key always names the same resource (a schedule's occurrence creates its pipeline run
    once, however often it is fired again after a crash)."""
    _check_prefix(prefix)
    rand = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:10], "big")
    ms = min(max(ms, 0), _TIME_MAX)
    return prefix + _encode(ms, TIME_CHARS) + _encode(rand, RANDOM_CHARS)


def is_id(value: str, prefix: str) -> bool:
    """True if ``value`` is shaped like an id minted by :func:`new_id` with ``prefix``."""
    return value.startswith(prefix) and bool(_BODY_RE.match(value[len(prefix) :]))


def id_time_ms(value: str) -> int:
    """The unix millisecond encoded in an id (any prefix). Raises ValueError if malformed."""
    _, sep, body = value.rpartition("_")
    if not sep or not _BODY_RE.match(body):
        raise ValueError(f"{value!r} is not a runplane id (prefix_ + 26 base32 chars)")
    ms = 0
    for char in body[:TIME_CHARS]:
        ms = ms * 32 + _DECODE[char]
    return ms


def new_secret(prefix: str) -> str:
    """A new bearer secret: ``prefix`` + 32 random bytes, URL-safe base64 (43 chars)."""
    _check_prefix(prefix)
    return prefix + secrets.token_urlsafe(SECRET_BYTES)


def hash_secret(secret: str) -> str:
    """Lowercase hex SHA-256 of the secret's UTF-8 bytes: what is stored instead of it."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def secrets_equal(a: str, b: str) -> bool:
    """Constant-time equality of two strings (hashes or secrets)."""
    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


def valid_org_id(value: str) -> bool:
    """Whether ``value`` is an org id (``org_`` + ``[a-z0-9_-]{1,64}``)."""
    return bool(_ORG_ID_RE.match(value))
