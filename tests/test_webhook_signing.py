"""Webhook signatures and the retry schedule (runplane/webhooks/signing.py, schedule.py)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import random

import pytest

from runplane.webhooks import schedule, signing
from runplane.webhooks.endpoints import new_secret

BODY = b'{"event":"run.failed","delivery_id":"dlv_1"}'


def test_the_runplane_signature_is_the_conventions_hmac() -> None:
    secret = new_secret()
    expected = hmac.new(secret.encode(), b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert signing.runplane_signature(secret, 1_700_000_000, BODY) == "sha256=" + expected


def test_the_standard_webhooks_signature_uses_the_decoded_key() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_")
    key = base64.b64decode(secret.removeprefix("whsec_"))
    assert len(key) == 24
    mac = hmac.new(key, b"dlv_1.1700000000." + BODY, hashlib.sha256).digest()
    got = signing.standard_signature(secret, "dlv_1", 1_700_000_000, BODY)
    assert got == "v1," + base64.b64encode(mac).decode()


def test_verify_refuses_tampering_other_keys_and_old_timestamps() -> None:
    secret = new_secret()
    heads = {k.lower(): v for k, v in signing.headers(secret, "dlv_1", "run.failed", 1000, BODY)}
    assert signing.verify(secret, heads, BODY, now=1000)
    assert signing.verify(secret, heads, BODY, now=1299)
    assert not signing.verify(secret, heads, BODY, now=1301)  # replayed 5 min later
    assert not signing.verify(secret, heads, BODY + b" ", now=1000)
    assert not signing.verify(new_secret(), heads, BODY, now=1000)
    assert not signing.verify(secret, {**heads, "x-runplane-timestamp": "1001"}, BODY, now=1000)
    assert not signing.verify(secret, {}, BODY, now=1000)
    assert heads["x-runplane-delivery"] == heads["webhook-id"] == "dlv_1"


def test_the_schedule_is_eight_attempts_with_jitter() -> None:
    rng = random.Random(3)
    assert schedule.ATTEMPTS == 8
    delays = [schedule.next_delay(n, None, rng) for n in range(1, 8)]
    for got, base in zip(delays, schedule.SCHEDULE_SEC[1:], strict=True):
        assert got is not None and base * 0.9 <= got <= base * 1.1
    assert schedule.next_delay(8, None, rng) is None  # gave up
    assert sum(schedule.SCHEDULE_SEC) / 3600 == pytest.approx(27.6, abs=0.1)


def test_retry_after_only_lengthens_the_wait_up_to_ten_hours() -> None:
    rng = random.Random(1)
    assert schedule.next_delay(1, 120.0, rng) == 120.0
    late = schedule.next_delay(2, 1.0, rng)
    assert late is not None and late > 200  # 5 min schedule wins
    assert schedule.next_delay(1, 10**7, rng) == schedule.MAX_RETRY_AFTER_SEC
    assert schedule.parse_retry_after("30", 0) == 30.0
    http_date = "Wed, 21 Oct 2015 07:28:00 GMT"
    assert schedule.parse_retry_after(http_date, 1445412480 - 60) == pytest.approx(60)
    assert schedule.parse_retry_after("soon", 0) is None
    assert schedule.parse_retry_after(None, 0) is None


@pytest.mark.parametrize(
    ("code", "retried"),
    [
        (500, True),
        (503, True),
        (429, True),
        (408, True),
        (404, False),
        (400, False),
        (301, False),
        (410, False),
    ],
)
def test_what_is_retried(code: int, retried: bool) -> None:
    assert schedule.retryable(code) is retried
