"""The node's GPUs as devices a job holds: assigned from the free set at the job's start
(by UUID where nvidia-smi gives one), shown to it with ``CUDA_VISIBLE_DEVICES`` and
``NVIDIA_VISIBLE_DEVICES``, recorded on the job (its ``gpus``), and freed at its end.

A job never gets a device another running job holds. A job that asks for no GPU on a
GPU node gets ``CUDA_VISIBLE_DEVICES=""`` (and ``NVIDIA_VISIBLE_DEVICES=void``): it
sees none, so it cannot use another job's device by accident. The pool lives in the
agent process with the jobs it runs (a restarted agent starts with no job running, the
pool all free); the server re-learns who holds what from the jobs' recorded ``gpus``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from runplane.agent.protocol import Gpu

#: The environment variables that select a job's devices (CUDA runtime, NVIDIA container
#: runtime); both get the same list.
CUDA_ENV = "CUDA_VISIBLE_DEVICES"
NVIDIA_ENV = "NVIDIA_VISIBLE_DEVICES"


@dataclass(frozen=True, slots=True)
class Device:
    index: int
    uuid: str = ""

    @property
    def id(self) -> str:
        """How the job and the server name it: the UUID when known, else the index."""
        return self.uuid or str(self.index)


class GpuPool:
    """Which of the node's GPUs are free; which job holds the others."""

    def __init__(self, gpus: Sequence[Gpu]) -> None:
        self._devices = [
            Device(g.index if g.index is not None else i, g.uuid) for i, g in enumerate(gpus)
        ]
        self._held: dict[Hashable, tuple[Device, ...]] = {}

    @property
    def total(self) -> int:
        return len(self._devices)

    def free(self) -> list[Device]:
        taken = {d for held in self._held.values() for d in held}
        return [d for d in self._devices if d not in taken]

    def take(self, holder: Hashable, count: int) -> tuple[Device, ...] | None:
        """``count`` free devices for ``holder`` (lowest indices first); None when fewer
        are free. A holder takes once; a second call returns what it holds."""
        if holder in self._held:
            return self._held[holder]
        free = self.free()
        if count > len(free):
            return None
        devices = tuple(free[:count])
        self._held[holder] = devices
        return devices

    def give_back(self, holder: Hashable) -> None:
        self._held.pop(holder, None)

    def held(self) -> dict[Hashable, tuple[Device, ...]]:
        return dict(self._held)


def visible_env(devices: Sequence[Device], node_has_gpus: bool) -> dict[str, str]:
    """The environment that shows a job exactly ``devices`` (nothing on a node without GPUs
    for a job that asked for none: the job's own env stays as it is)."""
    if not devices:
        return {CUDA_ENV: "", NVIDIA_ENV: "void"} if node_has_gpus else {}
    ids = ",".join(d.id for d in devices)
    return {CUDA_ENV: ids, NVIDIA_ENV: ids}
