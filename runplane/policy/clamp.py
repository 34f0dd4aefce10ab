"""Resource clamps: a run's requested limits kept within the admission ceilings.

One note per reduced dimension (``cpu 200->128``). A run that names no timeout gets the
ceiling as its timeout (the cap is a wall-clock bound on every run), without a note: it
asked for nothing that was reduced. Unset cpu, RAM and GPU stay unset (the node's share).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runplane.policy.caps import Caps

Number = int | float

#: (limits key, cap axis, label in notes)
DIMENSIONS = (
    ("cpu_cores", "max_cpu", "cpu"),
    ("ram_gb", "max_ram", "ram"),
    ("gpu_count", "max_gpu", "gpu"),
    ("timeout_sec", "max_timeout_sec", "timeout"),
)
LIMIT_KEYS = tuple(key for key, _, _ in DIMENSIONS)


@dataclass(frozen=True, slots=True)
class Clamp:
    #: the four limits after the clamp (None = unspecified)
    limits: dict[str, Number | None]
    notes: tuple[str, ...]
    #: the limits keys the notes are about, in the same order
    reduced: tuple[str, ...] = ()

    @property
    def clamped(self) -> bool:
        return bool(self.notes)


def _show(value: Number) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def clamp(requested: Mapping[str, Number | None], caps: Caps) -> Clamp:
    limits: dict[str, Number | None] = {}
    notes: list[str] = []
    reduced: list[str] = []
    for key, axis, label in DIMENSIONS:
        value = requested.get(key)
        cap = caps[axis]
        if key == "timeout_sec" and not value:
            limits[key] = cap
        elif value is not None and value > cap:
            limits[key] = cap
            notes.append(f"{label} {_show(value)}->{cap}")
            reduced.append(key)
        else:
            limits[key] = value
    return Clamp(limits=limits, notes=tuple(notes), reduced=tuple(reduced))
