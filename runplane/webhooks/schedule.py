"""When a delivery is tried again (conventions: the Standard Webhooks / Svix schedule).

Attempt 1 goes at once; after a failure the next waits 5 s, 5 min, 30 min, 2 h, 5 h, 10 h,
10 h (8 attempts over about 27 h), each delay with +-10 % jitter so a receiver that was
down is not hit by every sender at the same second. A ``Retry-After`` (seconds or an HTTP
date) of a 429/503 answer is honoured when it asks for longer (up to 10 h). Retried:
timeouts, connection errors, 408, 429 and 5xx. Not retried: other 4xx, 3xx (redirects
are not followed: a moved endpoint is to be updated), and a URL the egress guard refuses.
An attempt has 15 s to get a 2xx.
"""

from __future__ import annotations

import email.utils
import random

#: The wait before each attempt after the first (seconds).
SCHEDULE_SEC = (0.0, 5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)
ATTEMPTS = len(SCHEDULE_SEC)
ATTEMPT_TIMEOUT_SEC = 15.0
JITTER = 0.1
MAX_RETRY_AFTER_SEC = 36000.0


def retryable(code: int) -> bool:
    return code in (408, 429) or code >= 500


def next_delay(
    attempts_done: int, retry_after: float | None = None, rng: random.Random | None = None
) -> float | None:
    """Seconds until the next attempt after ``attempts_done`` failed ones (None: give up)."""
    if attempts_done >= ATTEMPTS:
        return None
    base = SCHEDULE_SEC[attempts_done]
    delay = base * (rng or random).uniform(1 - JITTER, 1 + JITTER)
    if retry_after is not None:
        delay = max(delay, min(retry_after, MAX_RETRY_AFTER_SEC))
    return delay


def parse_retry_after(value: str | None, now: float) -> float | None:
    """A ``Retry-After`` value in seconds from ``now`` (unix seconds); None if absent or
    unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)
