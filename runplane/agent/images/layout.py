"""What skopeo wrote: the OCI layout of one image (``index.json`` -> manifest -> config),
checked against the manifest the digest names, and the image config read from it."""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runplane.agent.execspec import ImageConfig
from runplane.agent.images.errors import DigestMismatch, ImageError

#: the layout's image name (``oci:<layout>:img``)
LAYOUT_TAG = "img"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX_TYPES = frozenset(
    {
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    }
)
#: ``platform.machine()`` as OCI spells an architecture
OCI_ARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "i686": "386",
    "i386": "386",
}

Layers = tuple[tuple[str, int], ...]
#: an index's entries: (manifest digest, "os/architecture[/variant]")
Platforms = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Manifest:
    """A manifest as a registry serves it: an image manifest's layers (digest, compressed
    size) and config digest, or an index's manifests by platform."""

    media_type: str
    layers: Layers = ()
    config: str = ""
    index: bool = False
    platforms: Platforms = ()

    @property
    def size(self) -> int:
        """Compressed bytes of its layers (0 for an index: not known before the copy)."""
        return sum(size for _, size in self.layers)


@dataclass(frozen=True, slots=True)
class LayoutImage:
    """The image of a layout: its manifest's digest, layers and config blob."""

    digest: str
    manifest: Manifest
    config: bytes


def parse_manifest(raw: bytes, what: str) -> Manifest:
    try:
        doc = json.loads(raw)
        media_type = str(doc.get("mediaType") or "")
        if media_type in INDEX_TYPES or "manifests" in doc:
            return Manifest(media_type, index=True, platforms=_platforms(doc["manifests"]))
        layers = tuple((str(d["digest"]), int(d["size"])) for d in doc["layers"])
        return Manifest(media_type or OCI_MANIFEST, layers, str(doc["config"]["digest"]))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ImageError(f"{what} is not an image manifest ({exc!r})") from None


def _platforms(entries: list[dict[str, Any]]) -> Platforms:
    found: list[tuple[str, str]] = []
    for entry in entries:
        platform_ = entry.get("platform") or {}
        name = f"{platform_.get('os', '')}/{platform_.get('architecture', '')}"
        if platform_.get("variant"):
            name += f"/{platform_['variant']}"
        found.append((str(entry["digest"]), name))
    return tuple(found)


def platform_manifest(index: Manifest, ref: str) -> str:
    """The digest of the node's platform's manifest in ``index`` (linux, the node's
    architecture; its first entry when the index has several variants); ImageError when
    the index has none."""
    wanted = f"linux/{node_arch()}"
    for digest, name in index.platforms:
        if name == wanted or name.startswith(wanted + "/"):
            return digest
    has = ", ".join(sorted({n for _, n in index.platforms if not n.startswith("unknown")}))
    raise ImageError(f"image {ref} has no {wanted} image (it has: {has or 'none'}): refused")


def _blob(layout: Path, digest: str) -> bytes:
    algorithm, _, hexd = digest.partition(":")
    return (layout / "blobs" / algorithm / hexd).read_bytes()


def read_layout(layout: Path) -> LayoutImage:
    """The image tagged :data:`LAYOUT_TAG` in ``layout`` (ImageError if it is not there)."""
    try:
        index = json.loads((layout / "index.json").read_bytes())
        descriptor = next(
            d
            for d in index["manifests"]
            if d.get("annotations", {}).get("org.opencontainers.image.ref.name") == LAYOUT_TAG
        )
        digest = str(descriptor["digest"])
        manifest = parse_manifest(_blob(layout, digest), f"manifest {digest}")
        return LayoutImage(digest, manifest, _blob(layout, manifest.config))
    except (OSError, ValueError, KeyError, TypeError, StopIteration) as exc:
        raise ImageError(f"the pulled image's layout is unreadable ({exc!r})") from None


def check_layout(image: LayoutImage, asked: Manifest, digest: str) -> None:
    """The layout holds the image ``digest`` names: the same layers and config as its
    manifest (skopeo may rewrite a Docker manifest as an OCI one: the blobs stay the
    same), the manifest itself when it was an OCI one."""
    same = image.manifest.layers == asked.layers and image.manifest.config == asked.config
    if asked.media_type == OCI_MANIFEST:
        same = same and image.digest == digest
    if not same:
        raise DigestMismatch(
            f"layer/manifest digest mismatch: refused (the pulled image {image.digest} is not "
            f"the manifest {digest})"
        )


def node_arch() -> str:
    machine = platform.machine().lower()
    return OCI_ARCH.get(machine, machine)


def image_config(raw: bytes) -> tuple[ImageConfig, str]:
    """The image config's run settings and its platform (``os/arch``)."""
    try:
        doc: dict[str, Any] = json.loads(raw)
        config = doc.get("config") or {}
        run = ImageConfig(
            env=tuple(str(e) for e in config.get("Env") or ()),
            entrypoint=tuple(str(e) for e in config.get("Entrypoint") or ()),
            cmd=tuple(str(e) for e in config.get("Cmd") or ()),
            working_dir=str(config.get("WorkingDir") or ""),
            user=str(config.get("User") or ""),
        )
        return run, f"{doc.get('os') or 'linux'}/{doc.get('architecture') or ''}"
    except (ValueError, TypeError, AttributeError) as exc:
        raise ImageError(f"the image config is unreadable ({exc!r})") from None


def check_platform(ref: str, platform_: str) -> None:
    """Refuse an image built for another architecture than the node's."""
    arch = platform_.partition("/")[2]
    if arch and arch != node_arch():
        raise ImageError(
            f"image {ref} is for {platform_}; this node is linux/{node_arch()}: refused"
        )
