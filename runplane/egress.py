"""The egress guard: where the server's own outgoing HTTP calls (webhooks, git providers) may go.

URLs in webhooks and git integrations are chosen by users, so without a guard the server could
be made to call services that only it can reach (server-side request forgery): its own admin
endpoints on loopback, databases on the private network, the cloud metadata service at
169.254.169.254 that hands out credentials.

What is refused
    * URLs that are not plain ``http``/``https`` with a host (``parse_url``): other schemes,
      credentials in the URL (``user:pass@``), bad ports, whitespace or control characters,
      non-ASCII hosts (give the ``xn--`` form), over-long URLs;
    * hosts that resolve to an address which is not a public internet address
      (``why_internal``): loopback, private (RFC 1918, IPv6 unique local), link-local (including
      cloud metadata), shared address space (CGNAT), unspecified, multicast, broadcast, reserved
      and any other non-global range. IPv4-mapped IPv6 (``::ffff:a.b.c.d``), NAT64
      (``64:ff9b::/96``) and 6to4 addresses are judged by the IPv4 address they embed.

Resolve, then pin
    ``resolve`` looks the host up once and judges *every* address in the answer: if any one is
    internal, the call is refused (a name answering both a public and an internal address could
    otherwise get the internal one used). The caller then connects to exactly the returned
    addresses (keeping the name for the ``Host`` header and TLS), never resolving again: a
    second lookup could get a different answer from a hostile DNS server with a short TTL
    (DNS rebinding), after the check had passed.

``RUNPLANE_EGRESS_ALLOW``
    A comma-separated list of exceptions (``Allow.of(settings.egress_allow)``). An entry is
    either a host name, matched exactly and case-insensitively (``git.corp.example``): that
    host may resolve to anything, internal addresses included; or an IP address or CIDR
    (``10.20.0.0/16``, ``fd00::/8``, ``127.0.0.1``): addresses in it are allowed whatever name
    led to them.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import TypeAlias
from urllib.parse import urlsplit

import trio

IPAddress: TypeAlias = IPv4Address | IPv6Address
IPNetwork: TypeAlias = IPv4Network | IPv6Network

MAX_URL_LENGTH = 2048
DEFAULT_PORTS = {"http": 80, "https": 443}
ALLOW_HINT = "set RUNPLANE_EGRESS_ALLOW=<host or CIDR> to allow it"

_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_DIGITS = re.compile(r"[0-9]{1,5}")

_THIS_NETWORK = IPv4Network("0.0.0.0/8")
_RFC1918 = (IPv4Network("10.0.0.0/8"), IPv4Network("172.16.0.0/12"), IPv4Network("192.168.0.0/16"))
_CGNAT = IPv4Network("100.64.0.0/10")
_BROADCAST = IPv4Address("255.255.255.255")
_ULA = IPv6Network("fc00::/7")
_NAT64 = IPv6Network("64:ff9b::/96")
_GLOBAL_UNICAST = IPv6Network("2000::/3")
_METADATA = frozenset(
    {
        IPv4Address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack, ...
        IPv4Address("169.254.170.2"),  # AWS ECS task metadata
        IPv4Address("100.100.100.200"),  # Alibaba Cloud
        IPv6Address("fd00:ec2::254"),  # AWS (IPv6)
    }
)


class BadUrl(ValueError):
    """A URL the egress guard does not accept; the message names the problem."""


class EgressRefused(Exception):
    """The destination is not a public internet address, and no RUNPLANE_EGRESS_ALLOW entry
    allows it."""

    def __init__(self, host: str, address: str, reason: str) -> None:
        self.host = host
        self.address = address
        self.reason = reason
        shown = host if host == address else f"{host} ({address})"
        super().__init__(f"refusing to connect to {shown}: {reason}; {ALLOW_HINT}")


class EgressUnreachable(Exception):
    """The host's name could not be resolved (no such name, resolver failure, or timeout)."""

    def __init__(self, host: str, detail: str) -> None:
        self.host = host
        super().__init__(f"cannot resolve {host}: {detail}")


@dataclass(frozen=True)
class Target:
    """A parsed outgoing URL: what to connect to, and what to ask for."""

    scheme: str  # "http" | "https"
    host: str  # lowercase; an IPv6 literal without brackets
    port: int
    path: str = "/"  # path, then "?query" if any; never the fragment

    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.port == DEFAULT_PORTS[self.scheme]:
            return f"{self.scheme}://{host}"
        return f"{self.scheme}://{host}:{self.port}"


def parse_url(url: str) -> Target:
    """Parse and validate an outgoing URL (``http``/``https`` only); raises ``BadUrl``."""
    # Messages name the problem but never echo the URL: it may carry a token.
    if not url:
        raise BadUrl("URL is empty")
    if len(url) > MAX_URL_LENGTH:
        raise BadUrl(f"URL is longer than {MAX_URL_LENGTH} characters")
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        raise BadUrl("URL contains whitespace or control characters")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise BadUrl("URL is malformed (bad IPv6 literal or brackets?)") from None
    scheme = parts.scheme.lower()
    if not scheme:
        raise BadUrl("URL has no scheme; accepted: http://... or https://...")
    if scheme not in DEFAULT_PORTS:
        raise BadUrl(f"URL scheme {scheme!r} is not allowed; accepted: http, https")
    if "@" in parts.netloc:
        raise BadUrl("URL contains credentials (user:password@), which are not allowed")
    host, port = _split_netloc(parts.netloc, default_port=DEFAULT_PORTS[scheme])
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return Target(scheme=scheme, host=host, port=port, path=path)


def _split_netloc(netloc: str, *, default_port: int) -> tuple[str, int]:
    if netloc.startswith("["):
        host, bracket, rest = netloc[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise BadUrl("URL has a malformed IPv6 host")
        port_text = rest[1:] if rest else ""
        if "%" in host:
            raise BadUrl("URL host has an IPv6 zone id, which is not supported")
        try:
            host = str(IPv6Address(host))
        except ValueError:
            raise BadUrl("URL host in brackets is not an IPv6 address") from None
    else:
        host, _, port_text = netloc.partition(":")
        if ":" in port_text:
            raise BadUrl("URL host is an IPv6 address without brackets")
        host = _check_host_name(host.lower())
    if not port_text:
        return host, default_port
    if not _DIGITS.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
        raise BadUrl("URL port is not a number from 1 to 65535")
    return host, int(port_text)


def _check_host_name(host: str) -> str:
    if not host:
        raise BadUrl("URL has no host")
    if not host.isascii():
        raise BadUrl("URL host is not ASCII; give an internationalised name in its xn-- form")
    name = host.removesuffix(".")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise BadUrl("URL host is not a valid host name or IPv4 address")
    return host


@dataclass(frozen=True)
class Allow:
    """The exceptions of ``RUNPLANE_EGRESS_ALLOW``: host names and networks."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def of(cls, entries: Sequence[str]) -> Allow:
        """Build from the settings' entries: a host name, or an IP address / CIDR each."""
        hosts: set[str] = set()
        networks: list[IPNetwork] = []
        for raw in entries:
            entry = raw.strip()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                if "/" in entry:
                    raise ValueError(f"egress allow entry {entry!r} is not a valid CIDR") from None
                hosts.add(_name_key(entry))
        return cls(hosts=frozenset(hosts), networks=tuple(networks))

    def host_allowed(self, host: str) -> bool:
        """Whether ``host`` is allowed by name (exact, case-insensitive, trailing dot ignored)."""
        return _name_key(host) in self.hosts

    def address_allowed(self, ip: IPAddress | str) -> bool:
        """Whether ``ip`` (or the IPv4 address it embeds) is in an allowed network."""
        address = ipaddress.ip_address(ip) if isinstance(ip, str) else ip
        candidates: list[IPAddress] = [address]
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            candidates.append(embedded)
        return any(a in net for a in candidates for net in self.networks)


def _name_key(host: str) -> str:
    return host.lower().removesuffix(".")


def _embedded_ipv4(ip: IPAddress) -> IPv4Address | None:
    """The IPv4 address that an IPv4-mapped or NAT64 (64:ff9b::/96) IPv6 address stands for."""
    if not isinstance(ip, IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def why_internal(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public internet address, or ``None`` if it is one."""
    if ip in _METADATA:
        return "cloud metadata service"
    if isinstance(ip, IPv6Address):
        return _why_internal_v6(ip)
    if ip.is_unspecified:
        return "unspecified address (reaches this host)"
    if ip in _THIS_NETWORK:
        return "'this network' address (0.0.0.0/8)"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip in _CGNAT:
        return "shared address space (CGNAT)"
    if any(ip in net for net in _RFC1918):
        return "private (RFC 1918)"
    if ip.is_multicast:
        return "multicast"
    if ip == _BROADCAST:
        return "broadcast"
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        return "not a public address"
    return None


def _why_internal_v6(ip: IPv6Address) -> str | None:
    embedded = _embedded_ipv4(ip)
    if embedded is not None:
        reason = why_internal(embedded)
        return None if reason is None else f"{reason} (IPv4 {embedded} embedded in {ip})"
    if ip.sixtofour is not None:  # 2002::/16: relayed to the embedded IPv4 address
        reason = why_internal(ip.sixtofour)
        if reason is not None:
            return f"{reason} (IPv4 {ip.sixtofour} embedded in 6to4 {ip})"
    if ip.is_unspecified:
        return "unspecified address (reaches this host)"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip in _ULA:
        return "private (unique local, fc00::/7)"
    if ip.is_site_local:
        return "site-local (deprecated, fec0::/10)"
    if ip.is_multicast:
        return "multicast"
    # Only 2000::/3 is global unicast; Python's is_global alone is too lenient on some versions.
    if ip not in _GLOBAL_UNICAST or not ip.is_global:
        return "not a public address"
    return None


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


async def _lookup(target: Target, seconds: float) -> list[IPAddress]:
    try:
        with trio.fail_after(seconds):
            infos = await trio.socket.getaddrinfo(
                target.host, target.port, type=trio.socket.SOCK_STREAM
            )
    except trio.TooSlowError:
        raise EgressUnreachable(target.host, f"no answer within {seconds:g}s") from None
    except socket.gaierror as exc:
        raise EgressUnreachable(target.host, exc.strerror or str(exc)) from None
    found: dict[IPAddress, None] = {}
    for family, _type, _proto, _canonname, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6) and isinstance(sockaddr[0], str):
            address = _ip_literal(sockaddr[0])
            if address is not None:
                found.setdefault(address, None)
    if not found:
        raise EgressUnreachable(target.host, "no IPv4 or IPv6 address")
    return list(found)


# ASYNC109: ``timeout`` bounds the DNS lookup alone and its expiry is a result of its own
# (``EgressUnreachable``, "no answer within ..."), not a cancellation of the caller.
async def resolve(
    target: Target,
    allow: Allow,
    *,
    timeout: float = 5.0,  # noqa: ASYNC109
) -> list[str]:
    """The addresses to connect to for ``target``, deduplicated, in resolver order.

    An IP-literal host is not looked up. Raises ``EgressUnreachable`` if the name does not
    resolve within ``timeout`` seconds, ``EgressRefused`` if any address is internal and
    neither the host (by name) nor the address (by CIDR) is allowed. Connect to exactly these
    addresses; do not resolve the name again.
    """
    literal = _ip_literal(target.host)
    addresses = [literal] if literal is not None else await _lookup(target, timeout)
    if literal is None and allow.host_allowed(target.host):
        return [str(a) for a in addresses]
    for address in addresses:
        reason = why_internal(address)
        if reason is not None and not allow.address_allowed(address):
            raise EgressRefused(target.host, str(address), reason)
    return [str(a) for a in addresses]


async def check(
    url: str,
    allow: Allow,
    *,
    timeout: float = 5.0,  # noqa: ASYNC109 (see resolve)
) -> tuple[Target, list[str]]:
    """Parse ``url`` and resolve its host: the target and the addresses to pin to."""
    target = parse_url(url)
    return target, await resolve(target, allow, timeout=timeout)
