"""Helpers of the image store tests: an order for a pushed image, a note that records."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

from runplane.agent.protocol import ImageOrder, RegistryAuth
from tests.oci import Registry

REF_NAME = "org.opencontainers.image.ref.name"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


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


def index_layout(root: Path, images: dict[str, Path]) -> Path:
    """An OCI layout whose image ``img`` is an image index of the ``img`` images of the
    given layouts, by platform (``os/arch``): a multi-architecture image."""
    out = root / "index-layout"
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    entries = []
    for platform, layout in images.items():
        for blob in (layout / "blobs" / "sha256").iterdir():
            shutil.copy(blob, blobs / blob.name)
        tagged = json.loads((layout / "index.json").read_text())["manifests"]
        desc = next(d for d in tagged if d["annotations"][REF_NAME] == "img")
        os_name, arch = platform.split("/")
        entries.append(
            {
                "mediaType": desc["mediaType"],
                "digest": desc["digest"],
                "size": desc["size"],
                "platform": {"os": os_name, "architecture": arch},
            }
        )
    index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries})
    digest = hashlib.sha256(index.encode()).hexdigest()
    (blobs / digest).write_text(index)
    (out / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    top = {
        "mediaType": OCI_INDEX,
        "digest": f"sha256:{digest}",
        "size": len(index.encode()),
        "annotations": {REF_NAME: "img"},
    }
    (out / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
    return out


def push_all(registry: Registry, layout: Path, repo: str) -> str:
    """Push every image of the layout's index (``skopeo copy --all``); the index's digest."""
    digest_file = layout.parent / f".{repo.replace('/', '_')}.digest"
    subprocess.run(
        [
            "skopeo", "copy", "--quiet", "--all", "--dest-tls-verify=false",
            "--digestfile", str(digest_file),
            f"oci:{layout}:img", f"docker://{registry.host}/{repo}:multi",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return digest_file.read_text().strip()
