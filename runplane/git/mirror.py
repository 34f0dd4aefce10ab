"""Server-side mirrors of the repositories of ``ssh_deploy_key`` connections.

The git proxy speaks git's smart HTTP to agents. A repository reachable over ssh only is
fetched by the server into a bare mirror (``<data dir>/git-mirrors/<connection id>.git``,
all branches and tags) with the connection's deploy key when a clone starts, then served
to the agent by ``git http-backend`` (git's own smart-HTTP program) from that mirror. The
key never leaves the server; fetches of one connection are serialized.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import trio

from .probe import Credential, GitProbeError, run_git

#: A mirror update may take this long (a first fetch of a big repository).
FETCH_SEC = 300.0
#: The mirror answers the agent's wants for any commit it has (the job's resolved one).
_CONFIG = (("uploadpack.allowAnySHA1InWant", "true"), ("core.logAllRefUpdates", "false"))


class CgiAnswer:
    """``git http-backend``'s answer, its body read as it comes (like an upstream's)."""

    def __init__(
        self, process: trio.Process, status: int, headers: dict[str, str], first: bytes
    ) -> None:
        self._process = process
        self.status = status
        self.headers = headers
        self._first = first

    async def chunks(self) -> AsyncIterator[bytes]:
        if self._first:
            yield self._first
        assert self._process.stdout is not None
        while chunk := await self._process.stdout.receive_some(65536):
            yield bytes(chunk)

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            if self._process.returncode is None:
                self._process.kill()
            await self._process.wait()


class Mirrors:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._locks: dict[str, trio.Lock] = {}

    def path(self, conn_id: str) -> Path:
        return self.root / f"{conn_id}.git"

    async def refresh(self, conn_id: str, repo_url: str, credential: Credential) -> None:
        """Bring the mirror up to the repository's branches and tags."""
        async with self._locks.setdefault(conn_id, trio.Lock()):
            path = self.path(conn_id)
            if not await trio.to_thread.run_sync(lambda: (path / "HEAD").exists()):
                await trio.to_thread.run_sync(lambda: self.root.mkdir(mode=0o700, exist_ok=True))
                await run_git(["init", "-q", "--bare", str(path)], None, within=30, what="git init")
                for key, value in _CONFIG:
                    await run_git(
                        ["-C", str(path), "config", key, value], None, within=30, what="git config"
                    )
            await run_git(
                [
                    "-C",
                    str(path),
                    "fetch",
                    "-q",
                    "--prune",
                    "--force",
                    "--",
                    repo_url,
                    "+refs/heads/*:refs/heads/*",
                    "+refs/tags/*:refs/tags/*",
                ],
                credential,
                within=FETCH_SEC,
                what="git fetch",
            )

    async def serve(
        self,
        conn_id: str,
        service_path: str,
        *,
        method: str,
        query: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
    ) -> CgiAnswer:
        """Answer one smart-HTTP request from the mirror with ``git http-backend``."""
        heads = {k.lower(): v for k, v in headers}
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": method,
            "PATH_INFO": f"/{conn_id}.git/{service_path}",
            "QUERY_STRING": query,
            "CONTENT_TYPE": heads.get("content-type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": "127.0.0.1",
        }
        if "content-encoding" in heads:
            env["HTTP_CONTENT_ENCODING"] = heads["content-encoding"]
        if "git-protocol" in heads:
            env["GIT_PROTOCOL"] = heads["git-protocol"]
        process = await trio.lowlevel.open_process(
            ["git", "http-backend"], stdin=-1, stdout=-1, stderr=-3, env=env
        )
        try:
            assert process.stdin is not None and process.stdout is not None
            async with process.stdin:
                await process.stdin.send_all(body)
            raw = bytearray()
            while b"\r\n\r\n" not in raw and b"\n\n" not in raw:
                chunk = await process.stdout.receive_some(65536)
                if not chunk:
                    raise GitProbeError("git http-backend gave no answer")
                raw += chunk
        except BaseException:
            with trio.CancelScope(shield=True):
                process.kill()
                await process.wait()
            raise
        sep = b"\r\n\r\n" if b"\r\n\r\n" in raw else b"\n\n"
        head, _, rest = bytes(raw).partition(sep)
        status, out_heads = 200, {}
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.strip().lower() == "status":
                status = int(value.strip().split()[0])
            elif name.strip():
                out_heads[name.strip().lower()] = value.strip()
        return CgiAnswer(process, status, out_heads, rest)
