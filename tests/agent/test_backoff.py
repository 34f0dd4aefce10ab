"""``runplane.agent.backoff``: reconnect delays (the agent's use of them is in test_client)."""

from __future__ import annotations

import random

from runplane.agent.backoff import Backoff


def test_backoff_doubles_with_jitter_up_to_the_cap_and_resets() -> None:
    backoff = Backoff(0.5, 30.0, random.Random(7))
    delays = [backoff.next_delay() for _ in range(10)]
    for n, delay in enumerate(delays):
        ceiling = min(30.0, 0.5 * 2**n)
        assert ceiling / 2 <= delay <= ceiling
    assert delays[-1] >= 15.0  # capped at 30, never below half of it
    assert len(set(delays)) == len(delays)  # jittered
    backoff.reset()
    assert 0.25 <= backoff.next_delay() <= 0.5
