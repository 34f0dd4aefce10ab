"""A git server for tests: ``git http-backend`` (git's own smart-HTTP CGI) behind a small
trio + h11 server on loopback that demands a token (HTTP Basic, any user name, the token
as password), as hosted providers do for personal access tokens. Clones, fetches and
``ls-remote`` run against it for real. :func:`make_repo` builds a bare repository."""

from __future__ import annotations

import base64
import os
import ssl
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import h11
import trio

from tests.h11_server import answer, read_request


def _git(*args: str, cwd: Path | None = None) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def make_repo(root: Path, name: str, files: dict[str, str]) -> dict[str, str]:
    """A bare repository ``root/name`` with one commit of ``files`` on ``main`` and an
    annotated tag ``v1`` on it, then a second commit on ``main``. Returns the commits:
    ``{"v1": sha, "main": sha}``."""
    work = root / f"{name}-work"
    _git("init", "-q", "-b", "main", str(work))
    for path, text in files.items():
        (work / path).write_text(text)
    _git("add", "-A", cwd=work)
    _git("commit", "-q", "-m", "first", cwd=work)
    first = _git("rev-parse", "HEAD", cwd=work)
    _git("tag", "-a", "v1", "-m", "v1", cwd=work)
    (work / "NEXT").write_text("second\n")
    _git("add", "-A", cwd=work)
    _git("commit", "-q", "-m", "second", cwd=work)
    second = _git("rev-parse", "HEAD", cwd=work)
    _git("clone", "-q", "--bare", str(work), str(root / name))
    return {"v1": first, "main": second}


@dataclass
class GitServer:
    root: Path
    token: str
    port: int = 0
    #: (method, path, authorized) of every request
    requests: list[tuple[str, str, bool]] = field(default_factory=list)
    #: the Authorization headers seen (tests check what credential was sent)
    authorizations: list[str] = field(default_factory=list)

    tls: ssl.SSLContext | None = None

    @classmethod
    async def start(
        cls, nursery: trio.Nursery, root: Path, token: str, *, tls: ssl.SSLContext | None = None
    ) -> GitServer:
        """``tls``: serve https with this context (tests/tls.py), else http."""
        server = cls(root, token, tls=tls)
        listeners = await nursery.start(trio.serve_tcp, server._accept, 0)
        server.port = listeners[0].socket.getsockname()[1]
        return server

    def url(self, repo: str, host: str = "127.0.0.1") -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{host}:{self.port}/{repo}"

    async def _accept(self, stream: trio.SocketStream) -> None:
        if self.tls is None:
            await self._handle(stream)
            return
        secure = trio.SSLStream(stream, self.tls, server_side=True)
        try:
            await secure.do_handshake()
        except trio.BrokenResourceError:
            return  # a client that did not trust the certificate
        await self._handle(secure)

    def _authorized(self, header: str | None) -> bool:
        if not header or not header.startswith("Basic "):
            return False
        try:
            user_pass = base64.b64decode(header[6:]).decode()
        except ValueError:
            return False
        return user_pass.partition(":")[2] == self.token

    async def _handle(self, stream: trio.abc.Stream) -> None:
        conn = h11.Connection(h11.SERVER)
        async with stream:
            request = await read_request(stream, conn)
            if request is None:
                return
            auth = request.headers.get("authorization")
            if auth:
                self.authorizations.append(auth)
            ok = self._authorized(auth)
            self.requests.append((request.method, request.target, ok))
            if not ok:
                await answer(stream, conn, 401, b"no", [("WWW-Authenticate", 'Basic realm="git"')])
                return
            status, heads, out = await self._cgi(
                request.method, request.target, request.headers, request.body
            )
            await answer(stream, conn, status, out, heads)

    async def _cgi(
        self, method: str, target: str, heads: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        path, _, query = target.partition("?")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": heads.get("content-type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": "tester",
            "REMOTE_ADDR": "127.0.0.1",
        }
        if "content-encoding" in heads:
            env["HTTP_CONTENT_ENCODING"] = heads["content-encoding"]
        if "git-protocol" in heads:
            env["GIT_PROTOCOL"] = heads["git-protocol"]
        done = await trio.run_process(
            ["git", "http-backend"], stdin=body, capture_stdout=True, env=env, check=True
        )
        raw = done.stdout
        split = raw.find(b"\r\n\r\n")
        sep = 4
        if split < 0:
            split, sep = raw.find(b"\n\n"), 2
        head, out = raw[:split].decode("latin-1"), raw[split + sep :]
        status, headers = 200, []
        for line in head.splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name and name.strip().lower() != "content-length":
                headers.append((name.strip(), value.strip()))
        return status, headers, out
