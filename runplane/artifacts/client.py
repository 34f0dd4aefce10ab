"""Streaming HTTP transfers for node agents (and benchmarks): download a URL to a file, PUT a
file to ``/v1/artifacts/<key>``. Standard library only (``http.client`` in a worker
thread), one chunk in memory at a time, a SHA-256 computed on the way.

The async wrappers run the blocking transfer in a trio worker thread; when the calling task
is cancelled the thread is abandoned and notices at its next chunk (or socket timeout) that
it must stop, so a cancel takes effect at once for the caller.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.client
import json
import os
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

import trio

CHUNK_BYTES = 1024 * 1024
#: Seconds without progress on a connection before a transfer is given up.
IDLE_TIMEOUT_SEC = 60.0
MAX_REDIRECTS = 5
USER_AGENT = "runplane-agent"

T = TypeVar("T")


class TransferError(Exception):
    """A transfer failed; ``str(exc)`` is one line for a job's error or log."""


class _Stopped(TransferError):
    pass


@dataclass(frozen=True, slots=True)
class Transferred:
    size: int
    sha256: str


def redact_url(url: str) -> str:
    """``url`` without credentials (user:password@) and query string, for logs and errors."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = "..." if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def http_base(server_url: str) -> str:
    """The ``http(s)://`` origin (and path prefix) of a server URL that may be ``ws(s)://``."""
    parts = urlsplit(server_url.strip())
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme.lower(), parts.scheme.lower())
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def artifact_url(server_url: str, key: str) -> str:
    return f"{http_base(server_url)}/v1/artifacts/{quote(key, safe='/')}"


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TransferError(f"not an http(s) URL: {redact_url(url)}")
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    port = parts.port
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(
            parts.hostname,
            port,
            timeout=timeout,
            context=ssl.create_default_context(),
            blocksize=CHUNK_BYTES,
        )
    else:
        conn = http.client.HTTPConnection(
            parts.hostname, port, timeout=timeout, blocksize=CHUNK_BYTES
        )
    return conn, target


def _problem_detail(response: http.client.HTTPResponse) -> str:
    with contextlib.suppress(Exception):
        body = response.read(4096)
        with contextlib.suppress(ValueError, AttributeError):
            return str(json.loads(body).get("detail") or "")[:300]
        return body.decode("utf-8", errors="replace").strip()[:300]
    return ""


def _check_stop(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise _Stopped("transfer stopped")


# --------------------------------------------------------------------------- blocking


def download_sync(
    url: str,
    dest: Path,
    *,
    max_bytes: int | None = None,
    timeout: float = IDLE_TIMEOUT_SEC,
    stop: threading.Event | None = None,
) -> Transferred:
    """GET ``url`` (following up to 5 redirects) into a new file ``dest``."""
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        conn, target = _connection(current, timeout)
        try:
            try:
                conn.request("GET", target, headers={"User-Agent": USER_AGENT})
                response = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                raise TransferError(f"cannot fetch {redact_url(url)}: {exc}") from None
            if response.status in (301, 302, 303, 307, 308):
                location = response.getheader("Location")
                if not location:
                    raise TransferError(f"{redact_url(current)} redirected without a Location")
                current = urljoin(current, location)
                continue
            if response.status != 200:
                detail = _problem_detail(response)
                raise TransferError(
                    f"fetching {redact_url(url)} answered HTTP {response.status}"
                    + (f": {detail}" if detail else "")
                )
            return _save(response, dest, max_bytes, stop, url)
        finally:
            conn.close()
    raise TransferError(f"{redact_url(url)}: more than {MAX_REDIRECTS} redirects")


def _save(
    response: http.client.HTTPResponse,
    dest: Path,
    max_bytes: int | None,
    stop: threading.Event | None,
    url: str,
) -> Transferred:
    digest = hashlib.sha256()
    size = 0
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        while True:
            _check_stop(stop)
            try:
                chunk = response.read1(CHUNK_BYTES)
            except (OSError, http.client.HTTPException) as exc:
                raise TransferError(f"fetching {redact_url(url)} broke off: {exc}") from None
            if not chunk:
                break
            size += len(chunk)
            if max_bytes is not None and size > max_bytes:
                raise TransferError(
                    f"{redact_url(url)} is larger than {max_bytes // (1024 * 1024)} MiB"
                )
            digest.update(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
        expected = response.getheader("Content-Length")
        if expected is not None and expected.isdigit() and int(expected) != size:
            raise TransferError(f"fetching {redact_url(url)} broke off at {size} bytes")
    finally:
        os.close(fd)
    return Transferred(size=size, sha256=digest.hexdigest())


def upload_sync(
    url: str,
    path: Path,
    *,
    timeout: float = IDLE_TIMEOUT_SEC,
    stop: threading.Event | None = None,
) -> Transferred:
    """PUT the file at ``path`` to ``url``; returns what the server stored (its X-Sha256 and
    X-Size), after checking it matches what was sent."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size

        def body() -> Iterator[bytes]:
            remaining = size
            while remaining > 0:
                _check_stop(stop)
                chunk = fh.read(min(CHUNK_BYTES, remaining))
                if not chunk:
                    raise TransferError(f"{path.name} shrank while it was being uploaded")
                remaining -= len(chunk)
                digest.update(chunk)
                yield chunk

        conn, target = _connection(url, timeout)
        try:
            response = _put(conn, target, body(), size, url)
            stored_sha, stored_size = _stored(response, url)
        finally:
            conn.close()
    sent = digest.hexdigest()
    if stored_sha != sent or stored_size != str(size):
        raise TransferError(
            f"upload to {redact_url(url)}: the server stored {stored_size or '?'} bytes with "
            f"sha256 {stored_sha or '?'}, sent {size} bytes with sha256 {sent}"
        )
    return Transferred(size=size, sha256=sent)


def _put(
    conn: http.client.HTTPConnection, target: str, body: Iterator[bytes], size: int, url: str
) -> http.client.HTTPResponse:
    """Send the PUT and read the server's answer, also one it gave early (a 413 before the
    whole body was sent, then a closed connection)."""
    headers = {
        "Content-Length": str(size),
        "Content-Type": "application/octet-stream",
        "User-Agent": USER_AGENT,
    }
    try:
        conn.request("PUT", target, body=body, headers=headers)
    except (OSError, http.client.HTTPException) as exc:
        # the server may have answered early (413) and closed: read that answer
        if conn.sock is None:
            raise TransferError(f"uploading to {redact_url(url)}: {exc}") from None
        try:
            return conn.getresponse()
        except (OSError, http.client.HTTPException, AttributeError):
            raise TransferError(f"uploading to {redact_url(url)}: {exc}") from None
    try:
        return conn.getresponse()
    except (OSError, http.client.HTTPException) as exc:
        raise TransferError(f"uploading to {redact_url(url)}: {exc}") from None


def _stored(response: http.client.HTTPResponse, url: str) -> tuple[str, str]:
    """What the server says it stored: (its X-Sha256, its X-Size); an answer but 201 fails."""
    if response.status != 201:
        detail = _problem_detail(response)
        raise TransferError(
            f"upload to {redact_url(url)} answered HTTP {response.status}"
            + (f": {detail}" if detail else "")
        )
    response.read()
    return (response.getheader("X-Sha256") or "").lower(), response.getheader("X-Size") or ""


# --------------------------------------------------------------------------- async


async def _in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    stop = threading.Event()
    try:
        return await trio.to_thread.run_sync(
            functools.partial(fn, *args, stop=stop, **kwargs), abandon_on_cancel=True
        )
    finally:
        stop.set()


async def download(
    url: str, dest: Path, *, max_bytes: int | None = None, idle_sec: float = IDLE_TIMEOUT_SEC
) -> Transferred:
    """GET ``url`` into the new file ``dest``; ``idle_sec`` without progress fails it."""
    return await _in_thread(download_sync, url, dest, max_bytes=max_bytes, timeout=idle_sec)


async def upload(url: str, path: Path, *, idle_sec: float = IDLE_TIMEOUT_SEC) -> Transferred:
    """PUT the file at ``path`` to ``url`` (an artifact URL); ``idle_sec`` as for download."""
    return await _in_thread(upload_sync, url, path, timeout=idle_sec)
