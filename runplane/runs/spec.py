"""The RunSpec body: every SubmitJobBody field plus ``layers``."""

from __future__ import annotations

from typing import Any

from pydantic import field_validator

from runplane.jobs.spec import SubmitJobBody
from runplane.layering import LAYERS

#: Most keys one config layer may set.
MAX_LAYER_KEYS = 1000


class RunSpecBody(SubmitJobBody):
    """``layers``: objects ``platform``, ``org``, ``project``, ``user`` (each key -> value),
    folded lowest first. Other layer names are ignored (reported as warnings by validate and
    resolve). The flat ``config`` is the ``user`` layer; sent with ``layers.user`` too, the
    two merge and ``config`` wins on a key both set."""

    layers: dict[str, Any] | None = None

    @field_validator("layers")
    @classmethod
    def _layers(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        for name in LAYERS:
            layer = value.get(name)
            if layer is None:
                continue
            if not isinstance(layer, dict):
                raise ValueError(f"layer {name!r} must be an object of config keys")
            if len(layer) > MAX_LAYER_KEYS:
                raise ValueError(f"layer {name!r} sets more than {MAX_LAYER_KEYS} keys")
        return value

    def config_layers(self) -> list[tuple[str, dict[str, Any]]]:
        """The known layers given, lowest first, with the flat config merged into ``user``."""
        given = self.layers or {}
        out: list[tuple[str, dict[str, Any]]] = []
        for name in LAYERS:
            layer = given.get(name)
            if name == "user":
                if layer is not None or self.config:
                    out.append(("user", {**(layer or {}), **self.config}))
            elif layer is not None:
                out.append((name, dict(layer)))
        return out

    def unknown_layers(self) -> list[str]:
        return sorted(set(self.layers or {}) - set(LAYERS))


def config_layers(body: SubmitJobBody) -> list[tuple[str, dict[str, Any]]]:
    """A body's config layers; a plain submit's config is its only (``user``) layer."""
    if isinstance(body, RunSpecBody):
        return body.config_layers()
    return [("user", dict(body.config))] if body.config else []
