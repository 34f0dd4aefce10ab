"""The egress guard (runplane/egress.py): URL validation, internal-address judgement, and
resolve-then-pin. Only the local resolver is used (/etc/hosts and names that cannot exist)."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import pytest
import trio

from runplane.egress import (
    Allow,
    BadUrl,
    EgressRefused,
    EgressUnreachable,
    Target,
    check,
    parse_url,
    resolve,
    why_internal,
)

NOBODY = Allow.of([])


# --- parse_url -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://example.com", Target("https", "example.com", 443, "/")),
        ("http://example.com", Target("http", "example.com", 80, "/")),
        (
            "HTTPS://Git.Example.COM:8443/a/b?x=1&y=2#frag",
            Target("https", "git.example.com", 8443, "/a/b?x=1&y=2"),
        ),
        ("http://example.com?x=1", Target("http", "example.com", 80, "/?x=1")),
        ("http://example.com:/p", Target("http", "example.com", 80, "/p")),
        ("http://10.0.0.1:8080/hook", Target("http", "10.0.0.1", 8080, "/hook")),
        ("https://[2606:4700:4700::1111]/", Target("https", "2606:4700:4700::1111", 443, "/")),
        (
            "https://[2606:4700:4700:0:0:0:0:1111]:444/x",
            Target("https", "2606:4700:4700::1111", 444, "/x"),
        ),
        ("https://example.com./", Target("https", "example.com.", 443, "/")),
        ("https://my_host.example.com/", Target("https", "my_host.example.com", 443, "/")),
        ("https://xn--bcher-kva.example/", Target("https", "xn--bcher-kva.example", 443, "/")),
        ("https://example.com:65535/", Target("https", "example.com", 65535, "/")),
    ],
)
def test_parse_url_accepts(url: str, expected: Target) -> None:
    assert parse_url(url) == expected


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://example.com/file", "scheme 'ftp'"),
        ("file:///etc/passwd", "scheme 'file'"),
        ("gopher://example.com", "scheme"),
        ("example.com/hook", "no scheme"),
        ("", "empty"),
        ("http://", "no host"),
        ("http:///path", "no host"),
        ("http:example.com", "no host"),
        ("http://:80/", "no host"),
        ("https://user:pass@example.com/", "credentials"),
        ("https://token@example.com/", "credentials"),
        ("https://example.com\\@evil.example/", "credentials"),
        ("http://example.com:0/", "port"),
        ("http://example.com:65536/", "port"),
        ("http://example.com:99999999/", "port"),
        ("http://example.com:http/", "port"),
        ("http://example.com:+80/", "port"),
        ("http://example.com:-1/", "port"),
        ("http://example.com /", "whitespace"),
        ("http://exa mple.com/", "whitespace"),
        (" http://example.com/", "whitespace"),
        ("http://example.com/\n", "whitespace"),
        ("http://example.com/a\tb", "whitespace"),
        ("http://example.com/\x00", "control"),
        ("http://example.com/\x7f", "control"),
        ("http://::1/", "without brackets"),
        ("http://[::1/", "malformed"),
        ("http://[10.0.0.1]/", "IPv6"),
        ("http://[fe80::1%25eth0]/", "zone id"),
        ("http://bücher.example/", "xn--"),
        ("http://exa$mple.com/", "not a valid host"),
        ("http://-bad.example.com/", "not a valid host"),
        ("http://a..b/", "not a valid host"),
        ("http://" + "a" * 64 + ".com/", "not a valid host"),
        ("https://example.com/" + "a" * 2048, "longer than 2048"),
    ],
)
def test_parse_url_refuses(url: str, problem: str) -> None:
    with pytest.raises(BadUrl, match=problem):
        parse_url(url)


def test_bad_url_is_a_value_error_and_does_not_echo_credentials() -> None:
    with pytest.raises(ValueError) as info:
        parse_url("https://alice:hunter2@example.com/")
    assert "hunter2" not in str(info.value)


def test_origin() -> None:
    assert parse_url("https://example.com/a?b").origin() == "https://example.com"
    assert parse_url("http://example.com:8080/").origin() == "http://example.com:8080"
    assert parse_url("http://example.com:443/").origin() == "http://example.com:443"
    assert parse_url("https://[::1]:8443/").origin() == "https://[::1]:8443"
    assert parse_url("https://[::1]/").origin() == "https://[::1]"


# --- why_internal --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.1", "loopback"),
        ("10.1.2.3", "private (RFC 1918)"),
        ("172.16.0.1", "private (RFC 1918)"),
        ("172.31.255.254", "private (RFC 1918)"),
        ("192.168.1.1", "private (RFC 1918)"),
        ("169.254.169.254", "cloud metadata"),
        ("169.254.1.1", "link-local"),
        ("100.64.1.1", "shared address space (CGNAT)"),
        ("100.127.255.254", "shared address space (CGNAT)"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "this network"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("240.0.0.1", "reserved"),
        ("192.0.2.1", "not a public address"),  # documentation
        ("198.18.0.1", "not a public address"),  # benchmarking
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fc00::1", "unique local"),
        ("fd12:3456::1", "unique local"),
        ("fd00:ec2::254", "cloud metadata"),
        ("fe80::1", "link-local"),
        ("fec0::1", "site-local"),
        ("ff02::1", "multicast"),
        ("ff0e::1", "multicast"),
        ("2001:db8::1", "not a public address"),  # documentation
        ("::7f00:1", "not a public address"),  # IPv4-compatible (deprecated)
        ("100::1", "not a public address"),  # discard-only
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private (RFC 1918)"),
        ("::ffff:169.254.169.254", "cloud metadata"),
        ("64:ff9b::a00:1", "private (RFC 1918)"),
        ("64:ff9b::7f00:1", "loopback"),
        ("64:ff9b::a9fe:a9fe", "cloud metadata"),
        ("2002:7f00:1::1", "loopback"),  # 6to4 of 127.0.0.1
        ("2002:c0a8:101::1", "private (RFC 1918)"),  # 6to4 of 192.168.1.1
    ],
)
def test_why_internal(address: str, reason: str) -> None:
    found = why_internal(ipaddress.ip_address(address))
    assert found is not None
    assert reason in found


def test_why_internal_names_the_embedded_address() -> None:
    found = why_internal(ipaddress.ip_address("::ffff:127.0.0.1"))
    assert found is not None
    assert "127.0.0.1" in found


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "93.184.215.14",
        "100.63.255.255",  # just below CGNAT
        "172.32.0.1",  # just above 172.16/12
        "2606:4700:4700::1111",
        "2001:4860:4860::8888",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
    ],
)
def test_public_addresses(address: str) -> None:
    assert why_internal(ipaddress.ip_address(address)) is None


# --- Allow ---------------------------------------------------------------------------------


def test_allow_of_hosts_and_networks() -> None:
    allow = Allow.of(["Git.Corp.Example", "10.20.0.0/16", " 192.168.1.5 ", "fd00::/8", "", "[::1]"])
    assert allow.host_allowed("git.corp.example")
    assert allow.host_allowed("GIT.corp.example.")
    assert not allow.host_allowed("corp.example")
    assert not allow.host_allowed("evil.git.corp.example")
    assert allow.address_allowed(ipaddress.ip_address("10.20.3.4"))
    assert allow.address_allowed("10.20.255.255")
    assert not allow.address_allowed("10.21.0.1")
    assert allow.address_allowed("192.168.1.5")
    assert not allow.address_allowed("192.168.1.6")
    assert allow.address_allowed("fd00::1")
    assert allow.address_allowed("::1")
    assert allow.address_allowed("::ffff:10.20.0.1")  # judged by the embedded IPv4 too
    assert not allow.address_allowed("127.0.0.1")
    assert not allow.host_allowed("10.20.3.4")


def test_allow_of_refuses_a_bad_cidr() -> None:
    with pytest.raises(ValueError, match="not a valid CIDR"):
        Allow.of(["10.0.0.0/33"])


# --- resolve / check -----------------------------------------------------------------------


async def test_localhost_is_refused() -> None:
    with pytest.raises(EgressRefused) as info:
        await resolve(parse_url("http://localhost:8080/"), NOBODY)
    message = str(info.value)
    assert "localhost" in message
    assert "loopback" in message
    assert "RUNPLANE_EGRESS_ALLOW" in message
    assert info.value.host == "localhost"
    assert info.value.reason == "loopback"


async def test_localhost_allowed_by_name() -> None:
    addresses = await resolve(parse_url("http://LOCALHOST:8080/"), Allow.of(["localhost"]))
    assert "127.0.0.1" in addresses
    assert len(addresses) == len(set(addresses))
    assert all(ipaddress.ip_address(a).is_loopback for a in addresses)


async def test_literal_allowed_by_cidr() -> None:
    target = parse_url("http://127.0.0.1:9000/")
    assert await resolve(target, Allow.of(["127.0.0.0/8"])) == ["127.0.0.1"]
    with pytest.raises(EgressRefused, match=r"refusing to connect to 127\.0\.0\.1: loopback"):
        await resolve(target, Allow.of(["10.0.0.0/8", "localhost"]))


async def test_metadata_literal_is_refused() -> None:
    with pytest.raises(EgressRefused, match="cloud metadata"):
        await check("http://169.254.169.254/latest/meta-data/", NOBODY)
    with pytest.raises(EgressRefused, match="cloud metadata"):
        await check("http://[::ffff:169.254.169.254]/", NOBODY)


async def test_public_literal_needs_no_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_dns(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an IP literal must not be looked up")

    monkeypatch.setattr(trio.socket, "getaddrinfo", no_dns)
    target, addresses = await check("https://93.184.215.14/hook", NOBODY)
    assert target == Target("https", "93.184.215.14", 443, "/hook")
    assert addresses == ["93.184.215.14"]
    assert await resolve(parse_url("https://[2606:4700:4700::1111]/"), NOBODY) == [
        "2606:4700:4700::1111"
    ]


async def test_unresolvable_name() -> None:
    with pytest.raises(EgressUnreachable, match=r"cannot resolve does-not-exist\.invalid: "):
        await check("https://does-not-exist.invalid/", NOBODY)


def _answer(*addresses: str) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for address in addresses:
        if ":" in address:
            out.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, 443, 0, 0)))
        else:
            out.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, 443)))
    return out


async def test_any_internal_answer_refuses_the_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rebinding-style answer (public and internal together) is refused as a whole."""

    async def fake(host: str, port: int, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        assert host == "hooks.example.com"
        assert port == 443
        return _answer("93.184.215.14", "10.0.0.7")

    monkeypatch.setattr(trio.socket, "getaddrinfo", fake)
    target = parse_url("https://hooks.example.com/")
    with pytest.raises(EgressRefused) as info:
        await resolve(target, NOBODY)
    assert str(info.value).startswith(
        "refusing to connect to hooks.example.com (10.0.0.7): private (RFC 1918); set"
    )
    assert info.value.address == "10.0.0.7"
    assert await resolve(target, Allow.of(["10.0.0.0/24"])) == ["93.184.215.14", "10.0.0.7"]
    assert await resolve(target, Allow.of(["hooks.example.com"])) == ["93.184.215.14", "10.0.0.7"]


async def test_public_answers_are_deduplicated_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    async def fake(*args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        return _answer(
            "2606:4700:4700::1111", "1.1.1.1", "2606:4700:4700::1111", "8.8.8.8", "1.1.1.1"
        )

    monkeypatch.setattr(trio.socket, "getaddrinfo", fake)
    _, addresses = await check("https://dns.example.com/", NOBODY)
    assert addresses == ["2606:4700:4700::1111", "1.1.1.1", "8.8.8.8"]


async def test_mapped_answer_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async def fake(*args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        return _answer("::ffff:127.0.0.1")

    monkeypatch.setattr(trio.socket, "getaddrinfo", fake)
    with pytest.raises(EgressRefused, match="loopback"):
        await check("https://sneaky.example.com/", NOBODY)


async def test_resolver_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    async def hang(*args: Any, **kwargs: Any) -> Any:
        await trio.sleep_forever()

    monkeypatch.setattr(trio.socket, "getaddrinfo", hang)
    with pytest.raises(EgressUnreachable, match=r"cannot resolve slow\.example\.com: no answer"):
        await check("https://slow.example.com/", NOBODY, timeout=0.05)


async def test_resolver_error(monkeypatch: pytest.MonkeyPatch) -> None:
    async def fail(*args: Any, **kwargs: Any) -> Any:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(trio.socket, "getaddrinfo", fail)
    with pytest.raises(
        EgressUnreachable, match=r"cannot resolve flaky\.example\.com: Temporary failure"
    ):
        await check("https://flaky.example.com/", NOBODY)


async def test_bad_url_comes_before_any_lookup() -> None:
    with pytest.raises(BadUrl):
        await check("gopher://localhost/", NOBODY)
