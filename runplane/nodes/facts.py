"""A node row's facts (reported by its agent) and operator overrides, parsed once.

The agent's hello validates the facts (``runplane/agent/protocol.py`` ``Facts``), so a
stored row normally has every field; the defaults here are the protocol's own, used for
older or hand-written rows. The API view and the placer both read this one parse, so they
can never disagree about the same node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runplane.persistence import from_json


@dataclass(frozen=True, slots=True)
class GpuFacts:
    model: str = ""
    vendor: str = "nvidia"
    vram_gb: float = 0.0
    cuda: str = ""


@dataclass(frozen=True, slots=True)
class ImageCacheFacts:
    """A container node's image cache (``protocol.ImageFacts``): the digests it holds
    (``sha256:<hex>``, most recently used first), the bytes free under its limit and the
    limit. Its hello reports it, and a heartbeat whenever it changed."""

    digests: tuple[str, ...] = ()
    free_bytes: int = 0
    limit_bytes: int = 0

    @classmethod
    def parse(cls, value: Any) -> ImageCacheFacts | None:
        if not isinstance(value, Mapping):
            return None
        return cls(
            digests=tuple(str(d) for d in value.get("digests") or ()),
            free_bytes=int(value.get("free_bytes") or 0),
            limit_bytes=int(value.get("limit_bytes") or 0),
        )

    def view(self) -> dict[str, Any]:
        return {
            "digests": list(self.digests),
            "free_bytes": self.free_bytes,
            "limit_bytes": self.limit_bytes,
        }


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """Capacity after overrides (``cpu_cap``, ``ram_cap``, ``max_concurrency``)."""

    cpu_cores: float
    ram_gb: float
    disk_gb: float
    gpus: tuple[GpuFacts, ...]
    arch: str
    os: str
    capabilities: frozenset[str]
    max_concurrency: int
    dlperf: float
    #: its image cache (a node started with ``--executor container``), else None
    images: ImageCacheFacts | None = None

    @property
    def max_vram_gb(self) -> float:
        return max((g.vram_gb for g in self.gpus), default=0)

    @classmethod
    def parse(cls, facts: Any, overrides: Any = None) -> NodeFacts:
        """From the stored JSON (text or already decoded) of ``facts`` and ``overrides``."""
        f: Mapping[str, Any] = _decoded(facts)
        o: Mapping[str, Any] = _decoded(overrides)
        cpu = f.get("cpu_cores", 1)
        ram = f.get("ram_gb", 0)
        return cls(
            cpu_cores=float(min(cpu, o.get("cpu_cap") or cpu)),
            ram_gb=float(min(ram, o.get("ram_cap") or ram)),
            disk_gb=float(f.get("disk_gb", 0)),
            gpus=tuple(
                GpuFacts(
                    model=g.get("model", ""),
                    vendor=g.get("vendor", "nvidia"),
                    vram_gb=float(g.get("vram_gb", 0)),
                    cuda=g.get("cuda", ""),
                )
                for g in f.get("gpus", [])
            ),
            arch=f.get("arch", "x86_64"),
            os=f.get("os", "linux"),
            capabilities=frozenset(f.get("capabilities", [])),
            max_concurrency=int(o.get("max_concurrency") or f.get("max_concurrency", 1)),
            dlperf=float(f.get("dlperf", 0.0)),
            images=ImageCacheFacts.parse(f.get("images")),
        )


def _decoded(value: Any) -> Mapping[str, Any]:
    if isinstance(value, str):
        value = from_json(value)
    return value or {}
