"""Ids (prefixed, sortable, monotonic) and secrets (prefixed, hashed, compared in constant time)."""

from __future__ import annotations

import hashlib
import re
import threading

import pytest

from runplane import ids
from runplane.runtime import clock

ID_RE = re.compile(r"^job_[0-9abcdefghjkmnpqrstvwxyz]{26}$")


@pytest.fixture(autouse=True)
def fresh_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with a fresh monotonic state, and the state is restored after it,
    so pinned clocks here do not leak into ids minted by other tests."""
    monkeypatch.setattr(ids, "_last_ms", -1)
    monkeypatch.setattr(ids, "_last_random", 0)


def test_new_id_shape() -> None:
    value = ids.new_id("job_")
    assert ID_RE.match(value), value
    assert ids.is_id(value, "job_")
    assert not ids.is_id(value, "node_")
    assert not ids.is_id("job_" + "I" * 26, "job_")
    assert ids.new_id("node_").startswith("node_")


def test_ids_minted_later_sort_after_earlier_ones() -> None:
    minted = [ids.new_id("job_") for _ in range(5000)]  # many share a millisecond
    assert minted == sorted(minted)
    assert len(set(minted)) == len(minted)


def test_ids_stay_ordered_when_the_clock_stands_still_or_steps_back() -> None:
    with clock.override_wall(2_000_000_000.0):
        first = [ids.new_id("jt_") for _ in range(100)]
    with clock.override_wall(1_000_000_000.0):  # NTP stepped the clock back
        later = ids.new_id("jt_")
    assert first == sorted(first) and len(set(first)) == 100
    assert later > first[-1]


def test_ids_from_later_milliseconds_sort_after() -> None:
    with clock.override_wall(1_700_000_000.000):
        a = ids.new_id("job_")
    with clock.override_wall(1_700_000_000.001):
        b = ids.new_id("job_")
    assert a < b
    assert ids.id_time_ms(b) == 1_700_000_000_001


def test_id_time_ms_round_trips_and_rejects_garbage() -> None:
    with clock.override_wall(1_234_567_890.123):
        value = ids.new_id("node_")
    assert ids.id_time_ms(value) == 1_234_567_890_123
    for bad in ("node_", "node_xyz", "nounderscore", "node_" + "u" * 26):
        with pytest.raises(ValueError):
            ids.id_time_ms(bad)


def test_ids_are_unique_across_threads() -> None:
    out: list[list[str]] = [[] for _ in range(4)]

    def mint(bucket: list[str]) -> None:
        bucket.extend(ids.new_id("job_") for _ in range(2000))

    threads = [threading.Thread(target=mint, args=(b,)) for b in out]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for bucket in out for i in bucket]
    assert len(set(every)) == len(every)
    assert all(bucket == sorted(bucket) for bucket in out)


@pytest.mark.parametrize("prefix", ["", "job", "Job_", "job-", "_", "1job_"])
def test_bad_prefixes_are_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix"):
        ids.new_id(prefix)
    with pytest.raises(ValueError, match="prefix"):
        ids.new_secret(prefix)


def test_new_secret_shape_and_randomness() -> None:
    secret = ids.new_secret("rpj_")
    assert re.match(r"^rpj_[A-Za-z0-9_-]{43}$", secret), secret
    assert len({ids.new_secret("rpn_") for _ in range(1000)}) == 1000


def test_hash_secret_is_hex_sha256() -> None:
    secret = "rpj_example"
    digest = ids.hash_secret(secret)
    assert digest == hashlib.sha256(b"rpj_example").hexdigest()
    assert re.match(r"^[0-9a-f]{64}$", digest)
    assert ids.hash_secret(secret) == digest
    assert ids.hash_secret(secret + "x") != digest


def test_secrets_equal() -> None:
    assert ids.secrets_equal("abc", "abc")
    assert not ids.secrets_equal("abc", "abd")
    assert not ids.secrets_equal("abc", "abcd")
    assert not ids.secrets_equal("", "a")
    assert ids.secrets_equal("é", "é")
