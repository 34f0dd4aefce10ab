"""Image references, read as Docker reads them: ``[registry[:port]/]name[:tag][@sha256:<hex>]``.

No registry: ``docker.io``; a one-component name on ``docker.io``: ``library/<name>``; no
tag and no digest: ``latest``. The first component is the registry when it holds a ``.``
or a ``:``, or is ``localhost``. ``index.docker.io`` and ``registry-1.docker.io`` are
``docker.io``. A digest given is kept (the registry is still asked whether it exists).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DOCKER_HUB = "docker.io"
#: where Docker Hub's v2 API answers (``docker.io`` is its name in references)
DOCKER_HUB_API = "registry-1.docker.io"
_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
MAX_REFERENCE = 512

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_LABEL = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_HOST = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{{1,5}})?")
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")


class BadReference(ValueError):
    """Not an image reference; the message says what is wrong (and never more than the text)."""


@dataclass(frozen=True, slots=True)
class Reference:
    """A parsed, normalized reference: ``registry`` (``host[:port]``, lowercase),
    ``repository`` (``library/busybox``), ``tag`` and ``digest`` (``sha256:<hex>`` or '')."""

    registry: str
    repository: str
    tag: str
    digest: str = ""

    @property
    def name(self) -> str:
        """``registry/repository``: the name as a user writes it, normalized."""
        return f"{self.registry}/{self.repository}"

    def __str__(self) -> str:
        return self.name + (f"@{self.digest}" if self.digest else f":{self.tag}")

    def pinned(self, digest: str) -> str:
        """``registry/repository@<digest>``: what the job's ``image`` becomes."""
        return f"{self.name}@{digest}"

    @property
    def wanted(self) -> str:
        """What to ask the registry's manifests endpoint for: the digest, else the tag."""
        return self.digest or self.tag


def registry_key(host: str) -> str:
    """A registry's name as settings and credentials key it: lowercase ``host[:port]``,
    Docker Hub's aliases as ``docker.io``; raises :class:`BadReference`."""
    key = host.strip().lower()
    if not _HOST.fullmatch(key):
        raise BadReference(f"{host[:80]!r} is not a registry host[:port]")
    port = key.rpartition(":")[2] if not key.endswith("]") and ":" in key else ""
    if port and not 1 <= int(port) <= 65535:
        raise BadReference(f"{host[:80]!r}: the port is not 1 to 65535")
    return DOCKER_HUB if key in _HUB_ALIASES else key


def _split_registry(remainder: str) -> tuple[str, str]:
    first, slash, rest = remainder.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return registry_key(first), rest
    return DOCKER_HUB, remainder


def parse(text: str) -> Reference:
    """Read ``text`` as an image reference; raises :class:`BadReference`."""
    if not text or len(text) > MAX_REFERENCE:
        raise BadReference(f"an image reference is 1 to {MAX_REFERENCE} characters")
    if any(c.isspace() for c in text):
        raise BadReference("an image reference has no whitespace")
    remainder, at, digest = text.partition("@")
    if at and not _DIGEST.fullmatch(digest):
        raise BadReference("the digest after '@' must be sha256:<64 lowercase hex>")
    registry, path = _split_registry(remainder)
    name, tag = path, ""
    colon = path.rfind(":")
    if colon > path.rfind("/"):
        name, tag = path[:colon], path[colon + 1 :]
        if not _TAG.fullmatch(tag):
            raise BadReference(f"tag {tag[:40]!r} is not valid ([A-Za-z0-9_][A-Za-z0-9_.-]*)")
    if not _NAME.fullmatch(name):
        raise BadReference(
            f"name {name[:80]!r} is not valid: lowercase letters, digits and separators "
            "(. _ __ -) in '/'-separated components"
        )
    if registry == DOCKER_HUB and "/" not in name:
        name = f"library/{name}"
    return Reference(registry, name, tag or ("" if at else "latest"), digest)


def check(text: str | None) -> str | None:
    """A body validator: ``text`` as given when it reads as a reference (None passes)."""
    if text is not None:
        parse(text)
    return text
