"""Uploads and artifacts (auth-exempt, trust by grant): ``PUT/GET /v1/artifacts/{key}``,
``GET /v1/artifacts-zip/{prefix}``, ``POST /v1/uploads``.

Bodies stream both ways with one chunk in memory at a time. Quart's request body buffers
whatever the server receives until the route reads it, with no back-pressure; so this
blueprint installs :class:`BodyFlow` on registration: for PUT/POST to these paths the ASGI
``receive`` is gated so the server reads the socket only while the route keeps up (at most
:data:`FLOW_WINDOW` bytes buffered). The route then swaps in an uncapped body (nothing has
been received yet) and enforces ``RUNPLANE_MAX_UPLOAD_MB`` itself, while streaming.

Safety comes from the key space (``docs/artifacts.md``): a job's outputs live under its
unguessable job id, an upload under an unguessable ``up_`` id, and ``artifacts-zip`` answers
404 for a prefix whose job belongs to another org.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any, cast
from urllib.parse import quote

import trio
from quart import Blueprint, Response, request
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.routing import BaseConverter
from werkzeug.sansio import multipart as mp

from runplane.artifacts import (
    ArtifactNotFound,
    ArtifactStore,
    BadKey,
    KeyConflict,
    ObjectInfo,
    ObjectReader,
    ObjectWriter,
    TooLarge,
    check_key,
    check_prefix,
)
from runplane.artifacts.zipstream import zip_objects
from runplane.auth.rules import PUBLIC
from runplane.http.caller import current_caller
from runplane.http.context import services
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.openapi.route_doc import RawBody
from runplane.ids import is_id, new_id
from runplane.problems import FieldProblem, Problem, not_found

blueprint = Blueprint("artifacts", __name__)

#: Bytes the server may buffer ahead of a streaming route before it stops reading the socket.
FLOW_WINDOW = 2 * 1024 * 1024
#: A request body that sends nothing for this long is answered 408.
BODY_IDLE_SEC = 60.0
#: Most objects one artifacts-zip may hold.
MAX_ZIP_ENTRIES = 100_000
FLOW_SCOPE_KEY = "runplane.body_flow"
ARTIFACTS_PATH = "/v1/artifacts/"
UPLOADS_PATH = "/v1/uploads"
ARCHIVE_SUFFIXES = (".tar.gz", ".zip")
#: What the document lets a key be (runplane/artifacts/keys.py refuses less): printable
#: ASCII segments without / or \, none starting with ".", at most 8 of 127 characters.
_SEGMENT = r"[ -\-0-\[\]-~][ -.0-\[\]-~]{0,126}"
ARTIFACT_KEY = rf"^{_SEGMENT}(/{_SEGMENT}){{0,7}}$"
ARTIFACT_PREFIX = rf"^{_SEGMENT}(/{_SEGMENT}){{0,7}}/?$"
_MAGIC = {".zip": (b"PK\x03\x04", b"PK\x05\x06"), ".tar.gz": (b"\x1f\x8b",)}
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


# --------------------------------------------------------------------------- flow control


class BodyFlow:
    """Credit between the ASGI server and a route streaming the request body.

    Closed until the route calls :meth:`open`; then ``receive`` is only called while fewer
    than ``window`` received bytes wait to be read by the route."""

    def __init__(self, window: int = FLOW_WINDOW) -> None:
        self.window = window
        self.buffered = 0
        self.is_open = False
        self.body_done = False  # the last body message was received
        self.responding = False  # the route answered: nothing more goes to Quart
        self._changed = trio.Event()

    def open(self) -> None:
        self.is_open = True
        self._wake()

    def respond(self) -> None:
        """The route answered: Quart gets no more of the body."""
        self.responding = True
        self._wake()

    def consumed(self, nbytes: int) -> None:
        self.buffered = max(0, self.buffered - nbytes)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def gate(self) -> None:
        while self.responding or not self.is_open or self.buffered >= self.window:
            await self._changed.wait()


class BodyFlowMiddleware:
    """ASGI wrapper giving PUT/POST requests to the artifact and upload paths a
    :class:`BodyFlow` (``scope["runplane.body_flow"]``); other requests pass untouched.

    When the route answers before the whole body arrived (400, 413), the rest of the body
    is read and dropped here, and the answer says ``Connection: close``: otherwise the
    server's per-request queue stays full, the connection can neither close nor serve its
    next request, and a keep-alive client hangs on it."""

    def __init__(self, app: Any, window: int = FLOW_WINDOW) -> None:
        self.app = app
        self.window = window

    @staticmethod
    def wants(scope: dict[str, Any]) -> bool:
        if scope.get("type") != "http" or scope.get("method") not in ("PUT", "POST"):
            return False
        path: str = scope.get("path", "")
        return path.startswith(ARTIFACTS_PATH) or path == UPLOADS_PATH

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if not self.wants(scope):
            await self.app(scope, receive, send)
            return
        flow = BodyFlow(self.window)
        scope[FLOW_SCOPE_KEY] = flow

        async def gated_receive() -> dict[str, Any]:
            await flow.gate()
            message: dict[str, Any] = await receive()
            if message.get("type") == "http.request":
                flow.buffered += len(message.get("body", b""))
                flow.body_done = not message.get("more_body", False)
            return message

        async def drain() -> None:
            while not flow.body_done:
                message = await receive()
                if message.get("type") != "http.request" or not message.get("more_body"):
                    return

        async with trio.open_nursery() as nursery:

            async def send_wrapper(message: dict[str, Any]) -> None:
                if message.get("type") == "http.response.start" and not flow.responding:
                    flow.respond()
                    if not flow.body_done:
                        headers = [*message.get("headers", []), (b"connection", b"close")]
                        message = {**message, "headers": headers}
                        nursery.start_soon(drain)
                await send(message)

            await self.app(scope, gated_receive, send_wrapper)
            nursery.cancel_scope.cancel()


class _AnyPath(BaseConverter):
    """Matches everything, leading or doubled slashes included, so a bad key reaches the
    route and gets its 400 instead of a redirect or a 404."""

    regex = ".*"
    part_isolating = False


@blueprint.record_once
def _install(state: Any) -> None:
    state.app.url_map.converters["anykey"] = _AnyPath
    state.app.asgi_app = BodyFlowMiddleware(state.app.asgi_app)


# --------------------------------------------------------------------------- helpers


def _store() -> ArtifactStore:
    store = services().artifacts
    assert store is not None, "the artifact store is opened by the app's lifespan"
    return store


def _cap_bytes() -> int:
    return services().settings.max_upload_mb * 1024 * 1024


def _too_large() -> Problem:
    mb = services().settings.max_upload_mb
    return Problem(
        413,
        "payload_too_large",
        f"body is over the upload cap of {mb} MiB (RUNPLANE_MAX_UPLOAD_MB)",
    )


def _bad_key(exc: BadKey, field: str = "key") -> Problem:
    return Problem(400, "bad_key", str(exc), [FieldProblem(field, "bad_key", str(exc))])


class BodyStream:
    """The request body, chunk by chunk, capped at ``cap`` bytes (413 once crossed)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.received = 0
        length = request.content_length
        if length is not None and length > cap:
            raise _too_large()
        # put there by BodyFlowMiddleware; hypercorn's scope TypedDict does not list it
        self.flow = cast("BodyFlow | None", request.scope.get(FLOW_SCOPE_KEY))
        if self.flow is not None:
            # The gate kept the server from receiving anything yet: replace Quart's body
            # (capped at the 1 MiB JSON limit) by an uncapped one; the cap is ours.
            request.body = request.body_class(length, None)
            self.flow.open()
        self._body = request.body

    async def read(self) -> bytes | None:
        """The next chunk, or None at the end of the body."""
        with trio.move_on_after(BODY_IDLE_SEC) as idle:
            try:
                chunk: bytes = await self._body.__anext__()
            except StopAsyncIteration:
                return None
        if idle.cancelled_caught:
            raise Problem(408, "request_timeout", f"no request body data for {BODY_IDLE_SEC:.0f} s")
        if self.flow is not None:
            self.flow.consumed(len(chunk))
        self.received += len(chunk)
        if self.received > self.cap:
            raise _too_large()
        return chunk


def _disposition(filename: str) -> str:
    ascii_name = filename.encode("ascii", "replace").decode().replace('"', "_").replace("?", "_")
    ascii_name = "".join(c if 0x20 <= ord(c) < 0x7F else "_" for c in ascii_name) or "download"
    header = f'attachment; filename="{ascii_name}"'
    if ascii_name != filename:
        header += f"; filename*=UTF-8''{quote(filename, safe='')}"
    return header


def _download_headers(response: Response, filename: str) -> None:
    response.headers["Content-Disposition"] = _disposition(filename)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Cache-Control"] = "no-cache"


async def _stream_reader(reader: ObjectReader) -> AsyncIterator[bytes]:
    try:
        async for chunk in reader.chunks():
            yield chunk
    finally:
        await reader.aclose()


def artifact_path(key: str) -> str:
    return ARTIFACTS_PATH + quote(key, safe="/")


def public_origin() -> str:
    """The origin agents and users reach this server at: RUNPLANE_PUBLIC_URL, else the
    origin of the request."""
    configured = services().settings.public_url
    if configured:
        return configured.rstrip("/")
    return request.host_url.rstrip("/")


# --------------------------------------------------------------------------- artifacts


@blueprint.put("/v1/artifacts/<anykey:key>")
@doc(
    "Store an artifact (an agent, with its grant)",
    v.ArtifactStored,
    status=201,
    content="json",
    errors=(401, 403, 409, 411, 413),
    raw_body=RawBody(
        "application/octet-stream",
        {"type": "string", "format": "binary"},
        required=False,  # an empty artifact is an artifact
        description="the artifact's bytes (at most RUNPLANE_MAX_UPLOAD_MB)",
    ),
    path={"key": ARTIFACT_KEY},
    rule=PUBLIC,
)
async def put_artifact(key: str) -> tuple[dict[str, Any], int, dict[str, str]]:
    try:
        check_key(key)
    except BadKey as exc:
        raise _bad_key(exc) from None
    body = BodyStream(_cap_bytes())
    try:
        async with _store().writer(key, max_bytes=body.cap) as writer:
            while (chunk := await body.read()) is not None:
                await writer.write(chunk)
            expected = request.content_length
            if expected is not None and body.received != expected:
                raise Problem(400, "incomplete_body", "the body ended before Content-Length")
            info = await writer.commit()
    except TooLarge:
        raise _too_large() from None
    except KeyConflict as exc:
        raise Problem(409, "key_conflict", str(exc)) from None
    headers = {
        "X-Sha256": info.sha256 or "",
        "X-Size": str(info.size),
        "Location": artifact_path(key),
    }
    body_json = {"key": key, "ref": artifact_path(key), "sha256": info.sha256, "size": info.size}
    return body_json, 201, headers


async def _missing(key: str, what: str = "artifact") -> Problem:
    """The answer for an artifact that is not there: 410 when its job's artifacts were
    deleted by the retention janitor (docs/operations.md "Retention"), else 404."""
    job_id = key.split("/", 1)[0]
    if is_id(job_id, "job_") and await services().root.records.purged_at(job_id) is not None:
        return Problem(
            410,
            "artifact_expired",
            f"the {what} expired: the retention policy deleted job {job_id}'s artifacts "
            "(RUNPLANE_RETENTION_DAYS, or the org's retention_days); its row and final "
            "metrics are kept",
        )
    return not_found(what)


@blueprint.get("/v1/artifacts/<anykey:key>")
@doc(
    "Download an artifact",
    status=200,
    content="bytes",
    errors=(401, 403, 410),
    path={"key": ARTIFACT_KEY},
    rule=PUBLIC,
)
async def get_artifact(key: str) -> Response:
    try:
        check_key(key)
    except BadKey as exc:
        raise _bad_key(exc) from None
    store = _store()
    filename = key.rsplit("/", 1)[-1]
    if request.method == "HEAD":
        info = await store.stat(key)
        if info is None:
            raise await _missing(key)
        response = Response(b"", status=200, content_type="application/octet-stream")
        response.headers["Content-Length"] = str(info.size)
        _download_headers(response, filename)
        return response
    try:
        reader = await store.open_reader(key)
    except ArtifactNotFound:
        raise await _missing(key) from None
    response = Response(_stream_reader(reader), status=200, content_type="application/octet-stream")
    response.headers["Content-Length"] = str(reader.info.size)
    _download_headers(response, filename)
    response.timeout = None  # a big artifact on a slow link takes as long as it takes
    return response


@blueprint.get("/v1/artifacts-zip/<anykey:prefix>")
@doc(
    "Download artifacts under a prefix as a zip",
    status=200,
    content="bytes",
    errors=(401, 403),
    path={"prefix": ARTIFACT_PREFIX},
    rule=PUBLIC,
)
async def get_artifacts_zip(prefix: str) -> Response:
    try:
        prefix = check_prefix(prefix)
    except BadKey as exc:
        raise _bad_key(exc, "prefix") from None
    await _check_prefix_owner(prefix)
    store = _store()
    if await store.stat(prefix) is not None:
        raise Problem(404, "not_found", "not a directory: that prefix names one artifact")
    objects = await store.list(prefix, limit=MAX_ZIP_ENTRIES + 1)
    if not objects:
        raise not_found("artifacts")
    if len(objects) > MAX_ZIP_ENTRIES:
        raise Problem(
            400,
            "too_many_artifacts",
            f"more than {MAX_ZIP_ENTRIES} artifacts under that prefix; zip a narrower one",
        )
    response = Response(zip_objects(store, objects, prefix), status=200)
    response.headers["Content-Type"] = "application/zip"
    _download_headers(response, prefix.rsplit("/", 1)[-1] + ".zip")
    response.timeout = None
    return response


async def _check_prefix_owner(prefix: str) -> None:
    """404 unless the caller may read the prefix: a job's prefix belongs to the job's org;
    other prefixes (uploads) carry no org, so only a caller who reads every org may zip them.
    Unknown and foreign give the same body."""
    read_org = current_caller().read_org
    if read_org is None:
        return
    first = prefix.split("/", 1)[0]
    row = await services().root.records.row(first, None) if is_id(first, "job_") else None
    if row is None or row.org_id != read_org:
        raise not_found("artifacts")


# --------------------------------------------------------------------------- uploads


def _upload_name(filename: str) -> tuple[str, str]:
    """A safe stored name for an uploaded archive and its suffix; 400 for other types."""
    base = filename.replace("\\", "/").rsplit("/", 1)[-1].strip()
    suffix = next((s for s in ARCHIVE_SUFFIXES if base.lower().endswith(s)), None)
    if suffix is None:
        raise Problem(
            400,
            "unsupported_type",
            f"only .zip and .tar.gz archives can be uploaded, not {base[:100]!r}",
            [FieldProblem("file", "unsupported_type", "expected a .zip or .tar.gz file")],
        )
    stem = _UNSAFE_NAME.sub("_", base[: -len(suffix)]).strip("._-")[:150] or "upload"
    return stem + suffix, suffix


def _missing_file() -> Problem:
    return Problem(
        400,
        "missing_field",
        "multipart/form-data body with a `file` field (a .zip or .tar.gz) is required",
        [FieldProblem("file", "missing_field", "the `file` field is required")],
    )


class _UploadSink:
    """The one ``file`` part of an upload, written to the store as it arrives."""

    def __init__(self, writer: ObjectWriter, suffix: str, name: str) -> None:
        self.writer = writer
        self.suffix = suffix
        self.name = name
        self.head = b""
        self.done = False

    async def data(self, data: bytes) -> None:
        if len(self.head) < 4:
            self.head += data[: 4 - len(self.head)]
        await self.writer.write(data)

    def check_type(self) -> None:
        if not any(self.head.startswith(magic) for magic in _MAGIC[self.suffix]):
            kind = "zip" if self.suffix == ".zip" else "gzip (.tar.gz)"
            raise Problem(
                400,
                "unsupported_type",
                f"{self.name!r} is not a {kind} archive",
                [FieldProblem("file", "unsupported_type", f"content is not {kind}")],
            )


@blueprint.post("/v1/uploads")
@doc(
    "Upload a file for a job's inputs",
    v.UploadResult,
    errors=(400, 401, 403, 411, 413, 415),
    raw_body=RawBody(
        "multipart/form-data",
        {
            "type": "object",
            "required": ["file"],
            "properties": {
                "file": {
                    "type": "string",
                    "format": "binary",
                    "description": "one .zip or .tar.gz archive (its name ends so)",
                }
            },
            "additionalProperties": False,
        },
        encoding={"file": {"contentType": "application/zip, application/gzip"}},
    ),
    rule=PUBLIC,
)
async def upload() -> dict[str, Any]:
    boundary = request.mimetype_params.get("boundary")
    if request.mimetype != "multipart/form-data" or not boundary:
        raise _missing_file()
    body = BodyStream(_cap_bytes())
    decoder = mp.MultipartDecoder(boundary.encode("latin-1"), max_parts=16)
    parts = _UploadParts(body.cap)
    try:
        await _decode(body, decoder, parts)
    except TooLarge:
        raise _too_large() from None
    except RequestEntityTooLarge:
        raise Problem(400, "malformed_multipart", "too many parts in the multipart body") from None
    finally:
        if parts.sink is not None:
            parts.sink.writer.discard()
    if parts.sink is None or parts.info is None:
        raise _missing_file()
    path = artifact_path(parts.key)
    return {
        "url": public_origin() + path,
        "path": path,
        "name": parts.sink.name,
        "key": parts.key,
        "size": parts.info.size,
        "sha256": parts.info.sha256,
    }


async def _decode(body: BodyStream, decoder: mp.MultipartDecoder, parts: _UploadParts) -> None:
    """Feed the body to the decoder and its events to ``parts``, to the epilogue."""
    while True:
        chunk = await body.read()
        decoder.receive_data(chunk)
        while True:
            try:
                event = decoder.next_event()
            except ValueError as exc:
                raise Problem(
                    400, "malformed_multipart", f"malformed multipart body: {exc}"
                ) from None
            if isinstance(event, mp.NeedData):
                break
            if await parts.on(event):
                return
        if chunk is None:
            return


class _UploadParts:
    """An upload's multipart events: one file part, in field ``file``, stored as it comes."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.sink: _UploadSink | None = None
        self.key = ""
        self.info: ObjectInfo | None = None

    async def on(self, event: mp.Event) -> bool:
        """Take one event; True at the epilogue (the body is whole)."""
        if isinstance(event, mp.File):
            if event.name != "file":
                raise _unknown_field(event.name)
            if self.sink is not None:
                raise Problem(400, "too_many_files", "send one archive per upload in field `file`")
            name, suffix = _upload_name(event.filename)
            self.key = f"{new_id('up_')}/{name}"
            writer = await _store().begin(self.key, max_bytes=self.cap)
            self.sink = _UploadSink(writer, suffix, name)
        elif isinstance(event, mp.Field):
            if event.name == "file":
                raise Problem(
                    400,
                    "missing_field",
                    "the `file` field must be a file part (with a filename)",
                    [FieldProblem("file", "missing_field", "not a file part")],
                )
            raise _unknown_field(event.name)
        elif isinstance(event, mp.Data) and self.sink is not None and not self.sink.done:
            await self.sink.data(event.data)
            if not event.more_data:
                self.sink.check_type()
                self.info = await self.sink.writer.commit()
                self.sink.done = True
        return isinstance(event, mp.Epilogue)


def _unknown_field(name: str) -> Problem:
    return Problem(
        400,
        "unknown_field",
        f"unknown form field {name!r}; an upload has one field, `file`",
        [FieldProblem(name or "", "unknown_field", f"unknown form field {name!r}")],
    )
