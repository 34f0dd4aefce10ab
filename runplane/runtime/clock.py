"""The one clock of the runtime.

Every timer, timeout, deadline and timestamp in ``runplane.runtime`` reads time
through this module, so trio's ``MockClock`` (the ``autojump_clock`` fixture)
drives all of them in tests.

- :func:`now` is monotonic seconds from the trio clock: use it for intervals,
  deadlines and restart-intensity windows. trio's own timers
  (``trio.sleep``, ``trio.move_on_after``) read the same clock.
- :func:`wall` is unix seconds for timestamps shown to people or stored.
  Tests pin or drive it with :func:`override_wall`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import trio

WallSource = Callable[[], float]

_wall_source: WallSource = time.time


def now() -> float:
    """Monotonic seconds from the trio clock (needs a running trio loop)."""
    return trio.current_time()


def wall() -> float:
    """Unix seconds: ``time.time()`` unless overridden."""
    return _wall_source()


def set_wall_source(source: WallSource | None) -> None:
    """Use ``source`` for :func:`wall` from now on; ``None`` restores ``time.time``."""
    global _wall_source
    _wall_source = time.time if source is None else source


@contextmanager
def override_wall(value: float | WallSource) -> Iterator[None]:
    """Pin :func:`wall` to a fixed value, or to a callable, for the ``with`` block.

    ``override_wall(lambda: 1_700_000_000 + now())`` makes wall time follow a
    ``MockClock``.
    """
    global _wall_source
    previous = _wall_source
    _wall_source = value if callable(value) else (lambda: value)
    try:
        yield
    finally:
        _wall_source = previous
