"""Where the server asks about a registry's images, and where a node pulls them from:
``RUNPLANE_REGISTRY_MIRRORS`` (a registry's mirror serves its repositories under the same
paths), ``RUNPLANE_INSECURE_REGISTRIES`` (plain HTTP) and the egress guard (a registry
named in either setting is allowed by naming it: its host passes whatever it resolves to;
any other registry passes the guard as a webhook's URL does, ``RUNPLANE_EGRESS_ALLOW``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runplane import egress

from .reference import DOCKER_HUB, DOCKER_HUB_API


def _hostname(host: str) -> str:
    """``host[:port]`` without the port (an IPv6 literal without its brackets)."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if ":" in host else host


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where one registry's v2 API is reached: ``origin`` (``https://host[:port]``), and
    the egress exceptions its calls (and its token service's) pass with."""

    origin: str
    allow: egress.Allow


@dataclass(frozen=True, slots=True)
class Routing:
    mirrors: Mapping[str, str]
    insecure: frozenset[str]
    egress_allow: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, mirrors: Mapping[str, str], insecure: Sequence[str], egress_allow: Sequence[str]
    ) -> Routing:
        return cls(dict(mirrors), frozenset(insecure), tuple(egress_allow))

    def pull_host(self, registry: str) -> str:
        """The registry images of ``registry`` come from: its mirror, else itself."""
        return self.mirrors.get(registry, registry)

    def named(self, host: str) -> bool:
        """Whether ``host`` is named in either setting (then the egress guard lets it by)."""
        return host in self.insecure or host in self.mirrors or host in self.mirrors.values()

    def is_insecure(self, host: str) -> bool:
        return host in self.insecure

    def endpoint(self, registry: str) -> Endpoint:
        """Where the server asks about ``registry``'s images (its mirror when it has one;
        Docker Hub's API host for ``docker.io``)."""
        host = self.pull_host(registry)
        api = DOCKER_HUB_API if host == DOCKER_HUB else host
        scheme = "http" if self.is_insecure(host) else "https"
        entries = list(self.egress_allow)
        if self.named(host):
            entries.append(_hostname(host))
        return Endpoint(f"{scheme}://{api}", egress.Allow.of(entries))
