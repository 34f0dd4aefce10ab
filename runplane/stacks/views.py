"""JSON-ready projections of stacks for ``GET /v1/stacks?view=...``.

- ``full`` (default): every Stack field, in the spec's order; ``launch`` is ``null`` for a
  stack without a launch section.
- ``summary``: the discovery projection: name, version, display_name, description,
  categories, modes, unavailable, requires.
- ``launch``: what a launcher UI needs: every field except image, docs and examples (the
  spec: "launch keeps config/resource/launch-guide fields and omits image, docs,
  examples"). Every stack is listed, with or without a launch section.

Every view lists all stacks, unavailable ones included (flagged ``unavailable: true``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runplane.stacks.models import Stack

FULL = "full"
SUMMARY = "summary"
LAUNCH = "launch"
DEFAULT_VIEW = FULL
VIEWS: frozenset[str] = frozenset({FULL, SUMMARY, LAUNCH})

SUMMARY_FIELDS: tuple[str, ...] = (
    "name",
    "version",
    "display_name",
    "description",
    "categories",
    "modes",
    "unavailable",
    "requires",
)
LAUNCH_OMITS: frozenset[str] = frozenset({"image", "docs", "examples"})
#: Manifest fields no view shows (the spec's StackView has none of them): a stack's
#: ``streams`` show per job, in ``GET /v1/jobs/{id}/streams``.
NOT_IN_VIEWS: frozenset[str] = frozenset({"streams"})


class UnknownViewError(ValueError):
    """A ``view`` value that is not one of :data:`VIEWS`; the route answers 400."""

    def __init__(self, view: str) -> None:
        self.view = view
        self.accepted = sorted(VIEWS)
        super().__init__(f"unknown view {view!r}; accepted: {', '.join(self.accepted)}")


def parse_view(value: str | None) -> str:
    """The view to render; absent or empty means ``full``. Raises :class:`UnknownViewError`."""
    if value is None or value == "":
        return DEFAULT_VIEW
    if value not in VIEWS:
        raise UnknownViewError(value)
    return value


def stack_view(stack: Stack, view: str = DEFAULT_VIEW) -> dict[str, Any]:
    """One stack as a JSON-ready dict in the given view."""
    view = parse_view(view)
    if view == SUMMARY:
        return stack.model_dump(mode="json", include=set(SUMMARY_FIELDS))
    if view == LAUNCH:
        return stack.model_dump(mode="json", exclude=set(LAUNCH_OMITS | NOT_IN_VIEWS))
    return stack.model_dump(mode="json", exclude=set(NOT_IN_VIEWS))


def stacks_view(stacks: Iterable[Stack], view: str | None = None) -> list[dict[str, Any]]:
    """The ``GET /v1/stacks`` body: stacks sorted by name, each in ``view``.

    Accepts a :class:`~runplane.stacks.catalog.Catalog` (it iterates its stacks) or any
    iterable of stacks. Raises :class:`UnknownViewError` before rendering anything.
    """
    chosen = parse_view(view)
    return [stack_view(s, chosen) for s in sorted(stacks, key=lambda s: s.name)]
