"""Helpers of the image store tests: an order for a pushed image, a note that records."""

from __future__ import annotations

from pathlib import Path

from runplane.agent.protocol import ImageOrder, RegistryAuth
from tests.oci import Registry


def order_for(
    registry: Registry, repo: str, digest: str, auth: tuple[str, str] | None = None
) -> ImageOrder:
    """The order a server sends for ``<registry>/<repo>@<digest>`` (plain HTTP)."""
    return ImageOrder(
        ref=f"{registry.host}/{repo}@{digest}",
        source=f"{registry.host}/{repo}@{digest}",
        insecure=True,
        auth=RegistryAuth(username=auth[0], password=auth[1]) if auth else None,
    )


class Notes:
    """The system log lines a job would show."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    async def __call__(self, line: str) -> None:
        self.lines.append(line)

    def having(self, text: str) -> list[str]:
        return [line for line in self.lines if text in line]


def cache_paths(root: Path) -> list[str]:
    """What the cache holds on disk besides its index (entries, pulls, trash)."""
    return sorted(
        str(p.relative_to(root))
        for sub in ("sha256", "tmp", "trash")
        if (root / sub).is_dir()
        for p in (root / sub).iterdir()
    )
