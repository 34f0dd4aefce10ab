"""Policy caps: provenance per axis and layer, admission ceilings within the platform, the
0 = no cap rule of the concurrency axes, above-platform notes, the PUT body's validation."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from runplane.policy import (
    AXES,
    CONCURRENCY_AXES,
    RESOURCE_AXES,
    PolicyDoc,
    PolicyDocBody,
    above_platform,
    ceilings,
    effective,
    empty_doc,
    platform_caps,
)
from runplane.policy.caps import INT32_MAX, MAX_ENTRIES

PLATFORM = {
    "max_cpu": 128,
    "max_ram": 1024,
    "max_gpu": 16,
    "max_timeout_sec": 604800,
    "max_concurrent_org": 100,
    "max_concurrent_user": 20,
    "max_preempt_grace_sec": 300,
    "preemptible_default": False,
}
#: a value below the platform's per refinement layer, distinct per layer
BELOW = {"org": 2, "project": 4, "user": 8}


def below(axis: str, layer: str) -> int:
    return PLATFORM[axis] // BELOW[layer]


def doc_setting(axis: str, layer: str, value: int) -> PolicyDoc:
    """A doc that sets ``axis`` at ``layer`` only (project ``p``, user ``u``)."""
    if layer == "org":
        return PolicyDoc("o", org={axis: value})
    if layer == "project":
        return PolicyDoc("o", projects={"p": {axis: value}})
    return PolicyDoc("o", users={"u": {axis: value}})


# -- platform layer -----------------------------------------------------------------------


def test_platform_caps_reads_every_axis_from_settings() -> None:
    settings = SimpleNamespace(
        **{
            axis: value if isinstance(value, bool) else str(value)
            for axis, value in PLATFORM.items()
        }
    )
    assert platform_caps(settings) == PLATFORM


@pytest.mark.parametrize("doc", [None, empty_doc("o")], ids=["no-doc", "empty-doc"])
def test_platform_only(doc: PolicyDoc | None) -> None:
    eff = effective(PLATFORM, doc, subject="u", project="p")
    assert eff.values == PLATFORM
    assert eff.provenance == dict.fromkeys(AXES, "platform")
    caps = ceilings(eff, PLATFORM)
    assert caps.values == PLATFORM
    assert caps.provenance == dict.fromkeys(AXES, "platform")
    assert eff.view() == {**PLATFORM, "provenance": dict.fromkeys(AXES, "platform")}


# -- provenance per axis and layer --------------------------------------------------------


@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("layer", ["org", "project", "user"])
def test_axis_set_at_one_layer(axis: str, layer: str) -> None:
    value = below(axis, layer)
    doc = doc_setting(axis, layer, value)
    for subject, project in [("u", "p"), ("u", "q"), ("v", "p"), ("v", "q"), ("", "")]:
        applies = (
            layer == "org"
            or (layer == "project" and project == "p")
            or (layer == "user" and subject == "u")
        )
        eff = effective(PLATFORM, doc, subject=subject, project=project)
        caps = ceilings(eff, PLATFORM)
        where = f"{axis} at {layer}, subject {subject!r}, project {project!r}"
        assert eff.values[axis] == (value if applies else PLATFORM[axis]), where
        assert eff.provenance[axis] == (layer if applies else "platform"), where
        assert caps[axis] == eff.values[axis], where
        assert caps.provenance[axis] == eff.provenance[axis], where
        others = {a: p for a, p in eff.provenance.items() if a != axis}
        assert others == dict.fromkeys(others, "platform"), where


@pytest.mark.parametrize("axis", AXES)
def test_the_highest_applicable_layer_wins(axis: str) -> None:
    doc = PolicyDoc(
        "o",
        org={axis: below(axis, "org")},
        projects={"p": {axis: below(axis, "project")}},
        users={"u": {axis: below(axis, "user")}},
    )
    cases = {("u", "p"): "user", ("u", "q"): "user", ("v", "p"): "project", ("v", "q"): "org"}
    for (subject, project), layer in cases.items():
        eff = effective(PLATFORM, doc, subject=subject, project=project)
        assert (eff.values[axis], eff.provenance[axis]) == (below(axis, layer), layer)
        caps = ceilings(eff, PLATFORM)
        assert (caps[axis], caps.provenance[axis]) == (below(axis, layer), layer)


# -- ceilings -----------------------------------------------------------------------------


@pytest.mark.parametrize("axis", RESOURCE_AXES)
@pytest.mark.parametrize(
    ("delta", "bound"), [(-1, False), (0, False), (1, True), (INT32_MAX, True)]
)
def test_resource_ceiling_never_exceeds_the_platform(axis: str, delta: int, bound: bool) -> None:
    value = min(PLATFORM[axis] + delta, INT32_MAX)
    caps = ceilings(effective(PLATFORM, PolicyDoc("o", org={axis: value})), PLATFORM)
    assert caps[axis] == min(value, PLATFORM[axis])
    assert caps.provenance[axis] == ("platform" if bound else "org")


def test_zero_is_a_real_cap_on_a_resource_axis() -> None:
    platform = {**PLATFORM, "max_gpu": 0}
    caps = ceilings(effective(platform, PolicyDoc("o", org={"max_gpu": 4})), platform)
    assert (caps["max_gpu"], caps.provenance["max_gpu"]) == (0, "platform")
    caps = ceilings(effective(PLATFORM, PolicyDoc("o", org={"max_gpu": 0})), PLATFORM)
    assert (caps["max_gpu"], caps.provenance["max_gpu"]) == (0, "org")


# (platform ceiling, org value) -> (ceiling, provenance); 0 = no cap on both sides
CONCURRENCY_TABLE = [
    (100, 10, 10, "org"),
    (100, 100, 100, "org"),
    (100, 200, 100, "platform"),
    (100, 0, 100, "platform"),  # the org asks for no cap: the platform's applies
    (0, 10, 10, "org"),  # the platform has no cap: the org's applies
    (0, INT32_MAX, INT32_MAX, "org"),
    (0, 0, 0, "org"),  # no cap anywhere
]


@pytest.mark.parametrize("axis", CONCURRENCY_AXES)
@pytest.mark.parametrize(("ceiling", "value", "expected", "layer"), CONCURRENCY_TABLE)
def test_concurrency_zero_means_no_cap(
    axis: str, ceiling: int, value: int, expected: int, layer: str
) -> None:
    platform = {**PLATFORM, axis: ceiling}
    caps = ceilings(effective(platform, PolicyDoc("o", org={axis: value})), platform)
    assert (caps[axis], caps.provenance[axis]) == (expected, layer)


@pytest.mark.parametrize("axis", CONCURRENCY_AXES)
@pytest.mark.parametrize("ceiling", [0, 7])
def test_concurrency_platform_alone(axis: str, ceiling: int) -> None:
    platform = {**PLATFORM, axis: ceiling}
    caps = ceilings(effective(platform, None), platform)
    assert (caps[axis], caps.provenance[axis]) == (ceiling, "platform")


axis_values = st.integers(min_value=0, max_value=INT32_MAX)
sparse_caps = st.dictionaries(st.sampled_from(AXES), axis_values, max_size=len(AXES))


@given(
    platform=st.fixed_dictionaries({axis: axis_values for axis in AXES}),
    org=sparse_caps,
    project=sparse_caps,
    user=sparse_caps,
)
def test_ceilings_stay_within_the_platform(
    platform: dict[str, int], org: dict[str, int], project: dict[str, int], user: dict[str, int]
) -> None:
    doc = PolicyDoc("o", org=org, projects={"p": project}, users={"u": user})
    eff = effective(platform, doc, subject="u", project="p")
    caps = ceilings(eff, platform)
    for axis in RESOURCE_AXES:
        assert caps[axis] == min(eff.values[axis], platform[axis])
    for axis in CONCURRENCY_AXES:
        if platform[axis] == 0:
            assert caps[axis] == eff.values[axis]
        else:
            assert 1 <= caps[axis] <= platform[axis]
    for axis in AXES:
        expected = eff.provenance[axis] if caps[axis] == eff.values[axis] else "platform"
        assert caps.provenance[axis] == expected


# -- above_platform -----------------------------------------------------------------------


def test_above_platform_notes() -> None:
    platform = {**PLATFORM, "max_concurrent_user": 0}
    doc = PolicyDoc(
        "o",
        org={"max_cpu": 200, "max_ram": 10},
        projects={"p": {"max_gpu": 32}, "q": {"max_gpu": 16}},
        users={"u": {"max_concurrent_org": 0, "max_concurrent_user": 5}},
    )
    assert above_platform(doc, platform) == [
        "max_cpu 200 in the org layer is past the platform ceiling 128; 128 applies",
        "max_gpu 32 in the project 'p' is past the platform ceiling 16; 16 applies",
        "max_concurrent_org 0 in the user 'u' is past the platform ceiling 100; 100 applies",
    ]


def test_no_notes_within_the_platform() -> None:
    doc = PolicyDoc("o", org=dict(PLATFORM), users={"u": {"max_cpu": 1}})
    assert above_platform(doc, PLATFORM) == []
    assert above_platform(empty_doc("o"), PLATFORM) == []


# -- the PUT body -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"extra": 1},
        {"org": {"max_cpus": 4}},
        {"projects": {"p": {"cpu": 4}}},
        {"users": {"u": {"max_cpu": 4, "note": "x"}}},
    ],
)
def test_body_rejects_unknown_fields(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="xtra"):
        PolicyDocBody.model_validate(body)


@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("where", ["org", "projects", "users"])
def test_body_rejects_negative_values(axis: str, where: str) -> None:
    caps = {axis: -1}
    body = {"org": caps} if where == "org" else {where: {"x": caps}}
    with pytest.raises(ValidationError):
        PolicyDocBody.model_validate(body)


@pytest.mark.parametrize("axis", RESOURCE_AXES + CONCURRENCY_AXES)
def test_body_bounds(axis: str) -> None:
    with pytest.raises(ValidationError):
        PolicyDocBody.model_validate({"org": {axis: INT32_MAX + 1}})
    assert PolicyDocBody.model_validate({"org": {axis: INT32_MAX}}).org.sparse() == {
        axis: INT32_MAX
    }
    if axis in ("max_cpu", "max_ram", "max_timeout_sec"):
        with pytest.raises(ValidationError):
            PolicyDocBody.model_validate({"org": {axis: 0}})
    else:  # 0 GPUs is a cap; 0 concurrency is no cap
        assert PolicyDocBody.model_validate({"org": {axis: 0}}).org.sparse() == {axis: 0}


def test_preemption_axes() -> None:
    """The grace cap is a ceiling within the platform's; ``preemptible_default`` is a
    preference: an org may opt its jobs in although the platform's default is off."""
    for bad in (0, 86401):
        with pytest.raises(ValidationError):
            PolicyDocBody.model_validate({"org": {"max_preempt_grace_sec": bad}})
    with pytest.raises(ValidationError):
        PolicyDocBody.model_validate({"org": {"preemptible_default": 7}})
    body = PolicyDocBody.model_validate(
        {"org": {"preemptible_default": True, "max_preempt_grace_sec": 900}}
    )
    doc = PolicyDoc.from_body("o", body, 1)
    caps = ceilings(effective(PLATFORM, doc), PLATFORM)
    assert caps["preemptible_default"] is True and caps.provenance["preemptible_default"] == "org"
    assert caps["max_preempt_grace_sec"] == 300  # the platform's ceiling
    assert caps.provenance["max_preempt_grace_sec"] == "platform"
    assert above_platform(doc, PLATFORM) == [
        "max_preempt_grace_sec 900 in the org layer is past the platform ceiling 300; 300 applies"
    ]


@pytest.mark.parametrize("where", ["projects", "users"])
def test_body_entry_limit(where: str) -> None:
    entries = {f"k{i}": {"max_cpu": 1} for i in range(MAX_ENTRIES)}
    assert len(getattr(PolicyDocBody.model_validate({where: entries}), where)) == MAX_ENTRIES
    entries[f"k{MAX_ENTRIES}"] = {"max_cpu": 1}
    with pytest.raises(ValidationError):
        PolicyDocBody.model_validate({where: entries})


@pytest.mark.parametrize("key", ["", "x" * 129])
def test_body_rejects_bad_layer_keys(key: str) -> None:
    with pytest.raises(ValidationError):
        PolicyDocBody.model_validate({"projects": {key: {"max_cpu": 1}}})
    PolicyDocBody.model_validate({"projects": {"x" * 128: {"max_cpu": 1}}})


# -- PolicyDoc ----------------------------------------------------------------------------


def test_from_body_keeps_only_what_is_set() -> None:
    body = PolicyDocBody.model_validate(
        {
            "org_id": "o",
            "org": {"max_cpu": 64, "max_gpu": None},
            "projects": {"b": {"max_ram": 8}, "a": {}, "c": {"max_cpu": None}},
            "users": {"u": {}, "v": {"max_concurrent_user": 0}},
            "updated_at": "2000-01-01T00:00:00.000Z",
        }
    )
    doc = PolicyDoc.from_body("o", body, now=1_700_000_000_123)
    assert doc == PolicyDoc(
        "o",
        org={"max_cpu": 64},
        projects={"b": {"max_ram": 8}},
        users={"v": {"max_concurrent_user": 0}},
        updated_at=1_700_000_000_123,
    )
    assert not doc.empty
    assert doc.view()["updated_at"] == "2023-11-14T22:13:20.123Z"  # the server's time


@pytest.mark.parametrize(
    "body",
    [{}, {"org": {}}, {"projects": {"p": {}}, "users": {"u": {"max_cpu": None}}}],
)
def test_empty_doc(body: dict[str, Any]) -> None:
    doc = PolicyDoc.from_body("o", PolicyDocBody.model_validate(body), now=1)
    assert doc.empty
    assert (doc.org, doc.projects, doc.users) == ({}, {}, {})
    assert empty_doc("o").empty


@pytest.mark.parametrize(
    "doc",
    [
        PolicyDoc("o", org={"max_cpu": 1}),
        PolicyDoc("o", projects={"p": {"max_cpu": 1}}),
        PolicyDoc("o", users={"u": {"max_concurrent_user": 0}}),
    ],
)
def test_not_empty(doc: PolicyDoc) -> None:
    assert not doc.empty


def test_stored_round_trip() -> None:
    doc = PolicyDoc(
        "o",
        org={"max_cpu": 8},
        projects={"p": {"max_ram": 2}},
        users={"u": {"max_gpu": 0}},
        updated_at=5,
    )
    assert PolicyDoc.from_stored("o", doc.stored(), 5) == doc
    assert PolicyDoc.from_stored("o", {}, 5) == PolicyDoc("o", updated_at=5)
    assert empty_doc("o").view()["updated_at"] is None


def test_layers_apply_only_for_the_matching_subject_and_project() -> None:
    doc = PolicyDoc(
        "o", org={"max_cpu": 8}, projects={"p": {"max_ram": 2}}, users={"u": {"max_gpu": 1}}
    )
    assert doc.layers("u", "p") == [
        ("org", {"max_cpu": 8}),
        ("project", {"max_ram": 2}),
        ("user", {"max_gpu": 1}),
    ]
    assert doc.layers("v", "q") == [("org", {"max_cpu": 8}), ("project", {}), ("user", {})]
    assert doc.layers("", "") == [("org", {"max_cpu": 8}), ("project", {}), ("user", {})]
