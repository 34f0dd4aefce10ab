"""The one wording for a refused name: accepted names and the close one."""

from __future__ import annotations

import pytest

from runplane.suggest import accepted_phrase, closest, suggestion

LIMITS = ["cpu_cores", "ram_gb", "gpu_count", "pids", "timeout_sec", "no_internet", "egress_allow"]
STACKS = ["python", "shell", "sim-cartpole"]


@pytest.mark.parametrize(
    ("word", "choices", "expected"),
    [
        ("timeout", LIMITS, "timeout_sec"),
        ("shel", STACKS, "shell"),
        ("pyhton", STACKS, "python"),
        ("Phase", ["phase", "stack"], "phase"),
        ("org", ["org_id"], "org_id"),
        ("status", ["phase", "stack", "project", "spec", "node", "limit"], None),
        ("x", ["path", "ref", "type", "mode"], None),
        ("anything", [], None),
    ],
)
def test_closest(word: str, choices: list[str], expected: str | None) -> None:
    assert closest(word, choices) == expected


def test_suggestion_is_a_question_or_nothing() -> None:
    assert suggestion("shel", STACKS) == "did you mean 'shell'?"
    assert suggestion("tensorflow", STACKS) == ""


def test_only_the_closest_is_suggested() -> None:
    assert suggestion("limt", ["limit", "lint", "offset"]) == "did you mean 'limit'?"


def test_accepted_phrase_lists_in_order_and_suggests() -> None:
    assert accepted_phrase(LIMITS, "timeout") == (
        "accepted: cpu_cores, ram_gb, gpu_count, pids, timeout_sec, no_internet, egress_allow "
        "(did you mean 'timeout_sec'?)"
    )
    assert accepted_phrase(["b", "a"]) == "accepted: b, a"
    assert accepted_phrase(["path", "ref"], "x") == "accepted: path, ref"
    assert accepted_phrase(iter(["view"]), "veiw") == "accepted: view (did you mean 'view'?)"


def test_accepted_phrase_with_nothing_accepted() -> None:
    assert accepted_phrase([], "x") == "accepted: none"
