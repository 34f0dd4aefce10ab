"""clamp: one note per reduced dimension and only those, the timeout fill, floats."""

from __future__ import annotations

import itertools

import pytest

from runplane.policy import LIMIT_KEYS, Caps, clamp
from runplane.policy.clamp import Number

CAPS = Caps(
    values={
        "max_cpu": 128,
        "max_ram": 1024,
        "max_gpu": 4,
        "max_timeout_sec": 3600,
        "max_concurrent_org": 0,
        "max_concurrent_user": 0,
    },
    provenance={},
)
#: limits key -> (its cap, label in notes)
DIMS = {
    "cpu_cores": (128, "cpu"),
    "ram_gb": (1024, "ram"),
    "gpu_count": (4, "gpu"),
    "timeout_sec": (3600, "timeout"),
}
SUBSETS = [s for n in range(5) for s in itertools.combinations(LIMIT_KEYS, n)]


def test_dimensions() -> None:
    assert tuple(DIMS) == LIMIT_KEYS
    assert len(SUBSETS) == 16


@pytest.mark.parametrize("over", SUBSETS, ids=lambda s: "+".join(s) or "none")
@pytest.mark.parametrize("within", ["at-cap", "below-cap"])
def test_a_note_per_reduced_dimension(over: tuple[str, ...], within: str) -> None:
    requested: dict[str, Number | None] = {}
    for key, (cap, _) in DIMS.items():
        if key in over:
            requested[key] = cap * 3
        else:
            requested[key] = cap if within == "at-cap" else cap - 1
    result = clamp(requested, CAPS)
    assert result.notes == tuple(f"{DIMS[k][1]} {DIMS[k][0] * 3}->{DIMS[k][0]}" for k in over)
    assert result.reduced == over
    assert result.clamped == bool(over)
    assert result.limits == {
        key: cap if key in over else requested[key] for key, (cap, _) in DIMS.items()
    }


def test_exact_note_text() -> None:
    result = clamp({"cpu_cores": 200, "ram_gb": 2048, "gpu_count": 8, "timeout_sec": 7200}, CAPS)
    assert result.notes == ("cpu 200->128", "ram 2048->1024", "gpu 8->4", "timeout 7200->3600")
    assert result.reduced == ("cpu_cores", "ram_gb", "gpu_count", "timeout_sec")


@pytest.mark.parametrize(
    ("requested", "limit", "note"),
    [
        (200.0, 128, "cpu 200->128"),  # an integral float shows without ".0"
        (128.5, 128, "cpu 128.5->128"),
        (129.25, 128, "cpu 129.25->128"),
        (128.0, 128.0, None),  # at the cap: kept as asked
        (0.5, 0.5, None),
    ],
)
def test_floats(requested: float, limit: Number, note: str | None) -> None:
    result = clamp({"cpu_cores": requested}, CAPS)
    assert result.limits["cpu_cores"] == limit
    assert result.notes == ((note,) if note else ())


def test_float_ram_and_timeout() -> None:
    result = clamp({"ram_gb": 1500.0, "timeout_sec": 3600.5}, CAPS)
    assert result.notes == ("ram 1500->1024", "timeout 3600.5->3600")
    assert result.limits["ram_gb"] == 1024
    assert result.limits["timeout_sec"] == 3600


@pytest.mark.parametrize("timeout", [None, 0, 0.0, "missing"])
def test_unset_timeout_takes_the_cap_without_a_note(timeout: object) -> None:
    requested: dict[str, Number | None] = {"cpu_cores": 2}
    if timeout != "missing":
        requested["timeout_sec"] = timeout  # type: ignore[assignment]
    result = clamp(requested, CAPS)
    assert result.limits == {"cpu_cores": 2, "ram_gb": None, "gpu_count": None, "timeout_sec": 3600}
    assert result.notes == ()
    assert result.reduced == ()
    assert not result.clamped


def test_unset_resources_stay_unset() -> None:
    result = clamp({"cpu_cores": None, "ram_gb": None, "gpu_count": None, "timeout_sec": 60}, CAPS)
    assert result.limits == {
        "cpu_cores": None,
        "ram_gb": None,
        "gpu_count": None,
        "timeout_sec": 60,
    }
    assert result.notes == ()
    assert clamp({}, CAPS).limits == {
        "cpu_cores": None,
        "ram_gb": None,
        "gpu_count": None,
        "timeout_sec": 3600,
    }


def test_a_zero_gpu_cap_reduces_any_gpu_request() -> None:
    caps = Caps(values={**CAPS.values, "max_gpu": 0}, provenance={})
    result = clamp({"gpu_count": 1}, caps)
    assert result.notes == ("gpu 1->0",)
    assert result.limits["gpu_count"] == 0
    assert clamp({"gpu_count": 0}, caps).notes == ()
