"""What a real docker-registry does not show: a registry (a boundary we do not own, such
as Docker Hub or GHCR) answering with a multi-platform index, a token in
``access_token``, a body whose digest is not the one it claims, a rate limit with its own
Retry-After, a 5xx, a blob behind a redirect. A scripted HTTP server on loopback plays it
(tests/h11_server.py); the client is the server's real one."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field

import h11
import trio

from runplane.images import client
from runplane.images.client import OCI_INDEX, OCI_MANIFEST, RegistryError
from runplane.images.reference import parse
from runplane.images.routing import Routing
from tests.h11_server import Request, answer, read_request

Reply = tuple[int, dict[str, str], bytes]


@dataclass
class FakeRegistry:
    routes: dict[str, Callable[[Request], Reply]] = field(default_factory=dict)
    seen: list[Request] = field(default_factory=list)
    port: int = 0

    async def start(self, nursery: trio.Nursery) -> FakeRegistry:
        serve = functools.partial(trio.serve_tcp, self._handle, 0, host="127.0.0.1")
        self.port = (await nursery.start(serve))[0].socket.getsockname()[1]
        return self

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _handle(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        request = await read_request(stream, conn)
        if request is None:
            return
        self.seen.append(request)
        path = request.target.split("?")[0]
        status, headers, body = self.routes.get(path, lambda r: (404, {}, b"{}"))(request)
        await answer(stream, conn, status, body, list(headers.items()))

    async def resolve(self, text: str) -> client.Resolved:
        routing = Routing.of({}, (self.host,), ())
        return await client.resolve(parse(text), routing.endpoint(parse(text).registry), None)


def digest_of(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


INDEX = json.dumps(
    {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {"digest": "sha256:" + "1" * 64, "platform": {"os": "linux", "architecture": "amd64"}},
            {"digest": "sha256:" + "2" * 64,
             "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
            {"digest": "sha256:" + "3" * 64, "platform": {"os": "unknown", "architecture": "unknown"}},
        ],
    }
).encode()  # fmt: skip


async def test_an_index_behind_a_bearer_token_in_access_token(nursery: trio.Nursery) -> None:
    fake = await FakeRegistry().start(nursery)

    def manifest(request: Request) -> Reply:
        if request.headers.get("authorization") != "Bearer tok-123":
            realm = f'Bearer realm="http://{fake.host}/token",service="fake"'
            return 401, {"WWW-Authenticate": realm}, b'{"errors":[{"code":"UNAUTHORIZED"}]}'
        return 200, {"Content-Type": OCI_INDEX, "Docker-Content-Digest": digest_of(INDEX)}, INDEX

    fake.routes["/v2/team/multi/manifests/v1"] = manifest
    fake.routes["/token"] = lambda r: (200, {}, b'{"access_token": "tok-123"}')
    found = await fake.resolve(f"{fake.host}/team/multi:v1")
    assert found.digest == digest_of(INDEX)
    assert found.platforms == ["linux/amd64", "linux/arm64/v8"]
    token_ask = next(r for r in fake.seen if r.target.startswith("/token"))
    assert "scope=repository%3Ateam%2Fmulti%3Apull" in token_ask.target
    assert "service=fake" in token_ask.target


async def test_a_single_manifests_platform_comes_from_its_config_behind_a_redirect(
    nursery: trio.Nursery,
) -> None:
    fake = await FakeRegistry().start(nursery)
    config = json.dumps({"architecture": "arm64", "os": "linux"}).encode()
    manifest = json.dumps(
        {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": {"digest": digest_of(config)}}
    ).encode()
    fake.routes["/v2/a/b/manifests/v1"] = lambda r: (200, {"Content-Type": OCI_MANIFEST}, manifest)
    blob = f"/v2/a/b/blobs/{digest_of(config)}"
    fake.routes[blob] = lambda r: (307, {"Location": "/cdn/config"}, b"")
    fake.routes["/cdn/config"] = lambda r: (200, {}, config)
    found = await fake.resolve(f"{fake.host}/a/b:v1")
    assert (found.digest, found.platforms) == (digest_of(manifest), ["linux/arm64"])


async def test_what_the_registry_gets_wrong_is_unavailable(nursery: trio.Nursery) -> None:
    fake = await FakeRegistry().start(nursery)
    lying = {"Content-Type": OCI_INDEX, "Docker-Content-Digest": "sha256:" + "f" * 64}
    fake.routes["/v2/a/lies/manifests/v1"] = lambda r: (200, lying, INDEX)
    fake.routes["/v2/a/busy/manifests/v1"] = lambda r: (429, {"Retry-After": "7"}, b"")
    fake.routes["/v2/a/down/manifests/v1"] = lambda r: (502, {}, b"bad gateway")
    fake.routes["/v2/a/none/manifests/v1"] = lambda r: (
        404,
        {},
        b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}',
    )
    for name, kind, retry in (
        ("lies", "unavailable", None),
        ("busy", "unavailable", 7),
        ("down", "unavailable", None),
        ("none", "unknown", None),
    ):
        try:
            await fake.resolve(f"{fake.host}/a/{name}:v1")
        except RegistryError as exc:
            assert (exc.kind, exc.retry_after) == (kind, retry), name
        else:
            raise AssertionError(f"{name} resolved")
    pinned = f"{fake.host}/a/lies@sha256:{'0' * 64}"
    fake.routes["/v2/a/lies/manifests/sha256:" + "0" * 64] = lambda r: (200, {}, INDEX)
    try:
        await fake.resolve(pinned)
    except RegistryError as exc:
        assert exc.kind == "unavailable" and "not sha256:000" in exc.reason
    else:
        raise AssertionError("a body that is not the digest asked for was taken")
