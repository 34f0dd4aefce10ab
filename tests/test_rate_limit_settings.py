"""``RUNPLANE_RATE_LIMIT`` and ``RUNPLANE_RATE_LIMIT_ADDRESS``: the syntax, the defaults per
auth mode, and a bad value named in one line (at start-up too)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runplane.settings import (
    RATE_LIMIT_ADDRESS_DEFAULT,
    RATE_LIMIT_DEFAULT,
    RateLimit,
    SettingsError,
    load_settings,
)

SYNTAX = "accepted: off, or N/s, N/min or N/h with an optional ,burst=M (e.g. 20/s,burst=100)"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("20/s", RateLimit(20.0, 20)),
        ("20/s,burst=100", RateLimit(20.0, 100)),
        (" 10 / s , burst = 3 ", RateLimit(10.0, 3)),
        ("600/min", RateLimit(10.0, 600)),
        ("3600/h,burst=10", RateLimit(1.0, 10)),
        ("0.5/s", RateLimit(0.5, 1)),
    ],
)
def test_the_syntax(value: str, expected: RateLimit) -> None:
    settings = load_settings({"RUNPLANE_RATE_LIMIT": value, "RUNPLANE_RATE_LIMIT_ADDRESS": value})
    assert settings.rate_limits() == (expected, expected)


def test_defaults_follow_the_auth_mode() -> None:
    assert load_settings({}).rate_limits() == (None, None)
    assert load_settings({"RUNPLANE_AUTH": "shadow"}).rate_limits() == (None, None)
    required = load_settings({"RUNPLANE_AUTH": "required"})
    assert required.rate_limits() == (RATE_LIMIT_DEFAULT, RATE_LIMIT_ADDRESS_DEFAULT)
    off = load_settings(
        {
            "RUNPLANE_AUTH": "required",
            "RUNPLANE_RATE_LIMIT": "off",
            "RUNPLANE_RATE_LIMIT_ADDRESS": "",
        }
    )
    assert off.rate_limits() == (None, RATE_LIMIT_ADDRESS_DEFAULT)  # empty is unset
    opened = load_settings({"RUNPLANE_RATE_LIMIT_ADDRESS": "1/s"})
    assert opened.rate_limits() == (None, RateLimit(1.0, 1))


@pytest.mark.parametrize(
    ("name", "value", "hint"),
    [
        ("RUNPLANE_RATE_LIMIT", "lots", SYNTAX),
        ("RUNPLANE_RATE_LIMIT", "20/day", SYNTAX),
        ("RUNPLANE_RATE_LIMIT", "20", SYNTAX),
        ("RUNPLANE_RATE_LIMIT", "20/s,burst=", SYNTAX),
        ("RUNPLANE_RATE_LIMIT_ADDRESS", "-1/s", SYNTAX),
        (
            "RUNPLANE_RATE_LIMIT_ADDRESS",
            "0/s",
            "N and burst must be above 0 (N at most 1000000); " + SYNTAX,
        ),
        (
            "RUNPLANE_RATE_LIMIT",
            "5/s,burst=0",
            "N and burst must be above 0 (N at most 1000000); " + SYNTAX,
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_setting(name: str, value: str, hint: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings({name: value})
    assert str(info.value) == f"{name}={value!r} is not valid: {hint}"


def test_a_bad_value_stops_startup(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
    env.update(RUNPLANE_DATA_DIR=str(tmp_path), RUNPLANE_RATE_LIMIT="fast")
    out = subprocess.run(
        [sys.executable, "-m", "runplane", "serve", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"runplane: RUNPLANE_RATE_LIMIT='fast' is not valid: {SYNTAX}"
    ]
