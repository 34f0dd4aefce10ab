"""Folding ordered layers of key -> value maps, lowest precedence first, with provenance.

Used twice: policy caps (platform < org < project < user) and RunSpec config layers (the
same order). ``fold`` is pure and deterministic: the same layers give the same result, with
keys sorted wherever order could leak into JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The four layer names, lowest precedence first.
LAYERS = ("platform", "org", "project", "user")


@dataclass(frozen=True, slots=True)
class LayerDiff:
    """What one layer contributed: ``set`` = the keys it owns in the folded result (with
    their values), ``overridden`` = keys it set that a higher layer shadowed."""

    layer: str
    set: dict[str, Any]
    overridden: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"layer": self.layer, "set": dict(self.set), "overridden": list(self.overridden)}


@dataclass(frozen=True, slots=True)
class Folded:
    values: dict[str, Any]
    #: key -> name of the layer whose value won
    provenance: dict[str, str]
    #: one entry per layer given, in the order given
    diffs: tuple[LayerDiff, ...]


def fold(layers: Sequence[tuple[str, Mapping[str, Any]]]) -> Folded:
    """Fold ``layers`` (lowest precedence first): a key takes the value of the last layer
    that sets it. Layer names must be distinct."""
    names = [name for name, _ in layers]
    if len(set(names)) != len(names):
        raise ValueError(f"layer names repeat: {names}")
    provenance: dict[str, str] = {}
    for name, layer in layers:
        for key in layer:
            provenance[key] = name
    values = {key: _value_of(layers, provenance[key], key) for key in sorted(provenance)}
    diffs = tuple(
        LayerDiff(
            layer=name,
            set={key: layer[key] for key in sorted(layer) if provenance[key] == name},
            overridden=tuple(sorted(key for key in layer if provenance[key] != name)),
        )
        for name, layer in layers
    )
    return Folded(values=values, provenance=dict(sorted(provenance.items())), diffs=diffs)


def _value_of(layers: Sequence[tuple[str, Mapping[str, Any]]], name: str, key: str) -> Any:
    for layer_name, layer in layers:
        if layer_name == name:
            return layer[key]
    raise AssertionError(name)
