"""A fake git provider's commit status API for tests (the one mock the suite has: a
boundary we do not own). It checks what the real ones check, the token header and the
body's shape for its provider, and records each status it accepts."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import h11
import trio

from tests.h11_server import answer, read_request

_PATHS = {
    "gitea": re.compile(r"^/api/v1/repos/(?P<repo>[^/]+/[^/]+)/statuses/(?P<sha>[0-9a-f]{40})$"),
    "forgejo": re.compile(r"^/api/v1/repos/(?P<repo>[^/]+/[^/]+)/statuses/(?P<sha>[0-9a-f]{40})$"),
    "github": re.compile(r"^/api/v3/repos/(?P<repo>[^/]+/[^/]+)/statuses/(?P<sha>[0-9a-f]{40})$"),
    "gitlab": re.compile(r"^/api/v4/projects/(?P<repo>[^/]+)/statuses/(?P<sha>[0-9a-f]{40})$"),
}
_STATES = {
    "gitea": {"pending", "success", "error", "failure", "warning"},
    "forgejo": {"pending", "success", "error", "failure", "warning"},
    "github": {"pending", "success", "error", "failure"},
    "gitlab": {"pending", "running", "success", "failed", "canceled"},
}


@dataclass(frozen=True)
class Status:
    repo: str
    sha: str
    state: str
    body: dict[str, Any]


@dataclass
class FakeProvider:
    provider: str
    token: str
    port: int = 0
    statuses: list[Status] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # why requests were refused
    _changed: trio.Event = field(default_factory=trio.Event)

    @classmethod
    async def start(cls, nursery: trio.Nursery, provider: str, token: str) -> FakeProvider:
        fake = cls(provider, token)
        listeners = await nursery.start(trio.serve_tcp, fake._handle, 0)
        fake.port = listeners[0].socket.getsockname()[1]
        return fake

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def wait_for(self, count: int) -> list[Status]:
        while len(self.statuses) < count:
            await self._changed.wait()
        return self.statuses

    def _authorized(self, headers: dict[str, str]) -> bool:
        if self.provider == "gitlab":
            return headers.get("private-token") == self.token
        scheme = "Bearer" if self.provider == "github" else "token"
        return headers.get("authorization") == f"{scheme} {self.token}"

    def _check(
        self, method: str, target: str, headers: dict[str, str], raw: bytes
    ) -> tuple[int, Status | None]:
        match = _PATHS[self.provider].match(target)
        if method != "POST" or match is None:
            self.refused.append(f"{method} {target}")
            return 404, None
        if not self._authorized(headers):
            self.refused.append("bad token")
            return 401, None
        try:
            body = json.loads(raw)
        except ValueError:
            self.refused.append("not json")
            return 400, None
        context_key = "name" if self.provider == "gitlab" else "context"
        if body.get("state") not in _STATES[self.provider] or not body.get(context_key):
            self.refused.append(f"bad body {body}")
            return 422, None
        return 201, Status(match["repo"], match["sha"], body["state"], body)

    async def _handle(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        async with stream:
            request = await read_request(stream, conn)
            if request is None:
                return
            status, accepted = self._check(
                request.method, request.target, request.headers, request.body
            )
            if accepted is not None:
                self.statuses.append(accepted)
                self._changed.set()
                self._changed = trio.Event()
            await answer(stream, conn, status, b"{}")
