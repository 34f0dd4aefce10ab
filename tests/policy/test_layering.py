"""fold: provenance, values and per-layer diffs for every subset of the four layers."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from runplane.layering import LAYERS, Folded, LayerDiff, fold

#: every subset of the layers, in LAYERS order (16, the empty one included)
SUBSETS = [names for n in range(len(LAYERS) + 1) for names in itertools.combinations(LAYERS, n)]


def layer_values(name: str) -> dict[str, Any]:
    """Each layer sets the shared key ``k`` and its own key (inserted in reverse order, so
    a sorted result cannot come from insertion order)."""
    return {f"only_{name}": f"{name}-own", "k": f"{name}-k"}


def test_there_are_sixteen_subsets() -> None:
    assert len(SUBSETS) == 16
    assert len(set(SUBSETS)) == 16


@pytest.mark.parametrize("names", SUBSETS, ids=lambda names: "+".join(names) or "none")
def test_fold_every_subset(names: tuple[str, ...]) -> None:
    layers = [(name, layer_values(name)) for name in names]
    folded = fold(layers)

    if not names:
        assert folded == Folded(values={}, provenance={}, diffs=())
        return
    top = names[-1]
    expected_provenance = {"k": top} | {f"only_{name}": name for name in names}
    assert folded.provenance == expected_provenance
    assert list(folded.provenance) == sorted(expected_provenance)
    assert folded.values == {"k": f"{top}-k"} | {f"only_{n}": f"{n}-own" for n in names}
    assert list(folded.values) == sorted(folded.values)

    expected_diffs = tuple(
        LayerDiff(
            layer=name,
            set={"k": f"{name}-k", f"only_{name}": f"{name}-own"}
            if name == top
            else {f"only_{name}": f"{name}-own"},
            overridden=() if name == top else ("k",),
        )
        for name in names
    )
    assert folded.diffs == expected_diffs
    for diff in folded.diffs:
        assert list(diff.set) == sorted(diff.set)


@pytest.mark.parametrize("names", SUBSETS, ids=lambda names: "+".join(names) or "none")
def test_fold_is_deterministic(names: tuple[str, ...]) -> None:
    first = fold([(name, layer_values(name)) for name in names])
    again = fold([(name, dict(reversed(layer_values(name).items()))) for name in names])
    assert first == again
    assert [d.as_dict() for d in first.diffs] == [d.as_dict() for d in again.diffs]


def test_a_key_set_only_by_a_lower_layer_keeps_its_provenance() -> None:
    folded = fold([("platform", {"a": 1, "b": 2}), ("org", {"b": 3}), ("user", {})])
    assert folded.values == {"a": 1, "b": 3}
    assert folded.provenance == {"a": "platform", "b": "org"}
    assert [d.as_dict() for d in folded.diffs] == [
        {"layer": "platform", "set": {"a": 1}, "overridden": ["b"]},
        {"layer": "org", "set": {"b": 3}, "overridden": []},
        {"layer": "user", "set": {}, "overridden": []},
    ]


def test_a_falsy_value_still_wins() -> None:
    folded = fold([("platform", {"n": 5}), ("org", {"n": 0})])
    assert folded.values == {"n": 0}
    assert folded.provenance == {"n": "org"}
    assert folded.diffs[0].overridden == ("n",)


@pytest.mark.parametrize(
    "names", [("platform", "platform"), ("org", "user", "org"), ("user", "org", "user", "user")]
)
def test_repeated_layer_names_raise(names: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="repeat"):
        fold([(name, {"k": i}) for i, name in enumerate(names)])
