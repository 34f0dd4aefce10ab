"""Artifact and upload routes: in-process (test client) for the rules, and over a real socket
(hypercorn on loopback) for what only a real connection shows: raw traversal paths, the cap
measured while streaming a body without a Content-Length, an upload cut off half way,
readers racing a writer."""

from __future__ import annotations

import hashlib
import io
import socket
import tarfile
import zipfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from quart.datastructures import FileStorage
from quart_trio import QuartTrio

from runplane.http.app import create_app
from runplane.http.caller import Caller
from runplane.http.routes import artifacts as routes
from runplane.ids import new_id
from runplane.jobs import repo
from runplane.jobs.jobspec import JobSpec
from runplane.settings import Settings
from tests.artifacts.bytes import get_bytes
from tests.e2e.conftest import LiveServer, e2e_settings, start_server


def _svc(app: QuartTrio) -> Any:
    return app.extensions["runplane"]


def _tar_gz() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("main.py")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"1\n"))
    return buf.getvalue()


def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("main.py", "print(1)\n")
    return buf.getvalue()


# --------------------------------------------------------------------------- in process


async def test_put_then_get_round_trip_with_headers(client: Any) -> None:
    data = bytes(range(256)) * 1000
    put = await client.put("/v1/artifacts/job_x/out/report v1.bin", data=data)
    assert put.status_code == 201
    sha = hashlib.sha256(data).hexdigest()
    assert put.headers["X-Sha256"] == sha
    assert put.headers["X-Size"] == str(len(data))
    body = await put.get_json()
    assert body == {
        "key": "job_x/out/report v1.bin",
        "ref": "/v1/artifacts/job_x/out/report%20v1.bin",
        "sha256": sha,
        "size": len(data),
    }
    got = await client.get("/v1/artifacts/job_x/out/report v1.bin")
    assert got.status_code == 200
    assert await got.get_data() == data
    assert got.headers["Content-Type"] == "application/octet-stream"
    assert got.headers["Content-Length"] == str(len(data))
    assert got.headers["X-Content-Type-Options"] == "nosniff"
    assert got.headers["Content-Disposition"] == 'attachment; filename="report v1.bin"'


async def test_html_is_still_served_as_a_download(client: Any) -> None:
    await client.put("/v1/artifacts/job_x/page.html", data=b"<script>alert(1)</script>")
    got = await client.get("/v1/artifacts/job_x/page.html")
    assert got.headers["Content-Type"] == "application/octet-stream"
    assert got.headers["Content-Disposition"].startswith("attachment")
    assert got.headers["X-Content-Type-Options"] == "nosniff"


async def test_non_ascii_names_get_an_rfc_5987_filename(client: Any) -> None:
    await client.put("/v1/artifacts/job_x/résumé.txt", data=b"x")
    got = await client.get("/v1/artifacts/job_x/résumé.txt")
    disposition = got.headers["Content-Disposition"]
    assert disposition.startswith('attachment; filename="r_sum_.txt"')
    assert "filename*=UTF-8''r%C3%A9sum%C3%A9.txt" in disposition


async def test_missing_artifact_is_404(client: Any) -> None:
    got = await client.get("/v1/artifacts/job_x/nothing")
    assert got.status_code == 404
    assert (await got.get_json())["code"] == "not_found"


@pytest.mark.parametrize(
    "key",
    ["../etc/passwd", "a/../../b", "/etc/passwd", "a\\..\\b", "a\x00b", "a//b", "x" * 1100, ""],
)
async def test_traversal_and_malformed_keys_are_400(client: Any, key: str) -> None:
    for method in (client.put, client.get):
        response = await method("/v1/artifacts/" + key, data=b"x")
        assert response.status_code == 400, key
        body = await response.get_json()
        # a control character is refused at the edge, for every route (input_checks.py)
        assert body["code"] == ("invalid_text" if "\x00" in key else "bad_key")
        assert body["errors"][0]["key"] == "key"


async def test_key_conflict_is_409(client: Any) -> None:
    assert (await client.put("/v1/artifacts/k/a", data=b"1")).status_code == 201
    response = await client.put("/v1/artifacts/k/a/b", data=b"2")
    assert response.status_code == 409
    assert (await response.get_json())["code"] == "key_conflict"


async def test_json_body_cap_does_not_apply_but_the_upload_cap_does(
    make_settings: Callable[..., Settings],
) -> None:
    app = create_app(make_settings(max_upload_mb="2"))
    async with app.test_app():
        client = app.test_client()
        ok = await client.put("/v1/artifacts/k/1.5mb", data=b"x" * (3 * 512 * 1024))
        assert ok.status_code == 201  # over the 1 MiB JSON cap: fine
        big = await client.put("/v1/artifacts/k/3mb", data=b"x" * (3 * 1024 * 1024))
        assert big.status_code == 413
        body = await big.get_json()
        assert body["code"] == "payload_too_large" and "RUNPLANE_MAX_UPLOAD_MB" in body["detail"]
        assert await _svc(app).artifacts.stat("k/3mb") is None
        assert list(_svc(app).artifacts.tmp_dir.iterdir()) == []


@pytest.mark.parametrize(
    ("name", "stored", "data"),
    [("code.tar.gz", "code.tar.gz", _tar_gz()), ("Code.ZIP", "Code.zip", _zip())],
)
async def test_upload_answers_an_agent_reachable_url(
    app: QuartTrio, client: Any, name: str, stored: str, data: bytes
) -> None:
    response = await client.post(
        "/v1/uploads", files={"file": FileStorage(io.BytesIO(data), filename=name)}
    )
    assert response.status_code == 200
    body = await response.get_json()
    assert body["path"].startswith("/v1/artifacts/up_")
    assert body["url"] == "http://localhost" + body["path"]
    assert body["name"] == stored
    assert body["size"] == len(data) and body["sha256"] == hashlib.sha256(data).hexdigest()
    assert await get_bytes(_svc(app).artifacts, body["key"]) == data


async def test_upload_url_uses_the_public_url_when_set(
    make_settings: Callable[..., Settings],
) -> None:
    app = create_app(make_settings(public_url="https://runplane.example.com/"))
    async with app.test_app():
        response = await app.test_client().post(
            "/v1/uploads",
            files={"file": FileStorage(io.BytesIO(_zip()), filename="../../x y.zip")},
        )
        body = await response.get_json()
        assert body["url"].startswith("https://runplane.example.com/v1/artifacts/up_")
        assert body["name"] == "x_y.zip"  # only the base name, made safe


async def test_upload_refusals(app: QuartTrio, client: Any) -> None:
    def file(name: str, data: bytes) -> dict[str, FileStorage]:
        return {"file": FileStorage(io.BytesIO(data), filename=name)}

    cases = [
        (await client.post("/v1/uploads", files=file("x.rar", b"Rar!")), 400, "unsupported_type"),
        (
            await client.post("/v1/uploads", files=file("x.zip", b"not a zip")),
            400,
            "unsupported_type",
        ),
        (await client.post("/v1/uploads", files=file("x.tar.gz", _zip())), 400, "unsupported_type"),
        (await client.post("/v1/uploads", form={"file": "text"}), 400, "missing_field"),
        (await client.post("/v1/uploads", data=b"raw"), 400, "missing_field"),
        (await client.post("/v1/uploads", json={"file": 1}), 400, "missing_field"),
    ]
    other = {"other": FileStorage(io.BytesIO(_zip()), filename="a.zip")}
    cases.append((await client.post("/v1/uploads", files=other), 400, "unknown_field"))
    text_part = b'--B\r\nContent-Disposition: form-data; name="file"\r\n\r\njust text\r\n--B--\r\n'
    headers = {"Content-Type": "multipart/form-data; boundary=B"}
    response = await client.post("/v1/uploads", data=text_part, headers=headers)
    cases.append((response, 400, "missing_field"))
    two = (
        b'--B\r\nContent-Disposition: form-data; name="file"; filename="a.zip"\r\n\r\n'
        + _zip()
        + b'\r\n--B\r\nContent-Disposition: form-data; name="file"; filename="b.zip"\r\n\r\n'
        + _zip()
        + b"\r\n--B--\r\n"
    )
    response = await client.post("/v1/uploads", data=two, headers=headers)
    cases.append((response, 400, "too_many_files"))
    for response, status, code in cases:
        assert response.status_code == status
        body = await response.get_json()
        assert body["code"] == code, body
    assert await _svc(app).artifacts.list("up_") == []
    assert list(_svc(app).artifacts.tmp_dir.iterdir()) == []


async def test_artifacts_zip(client: Any) -> None:
    await client.put("/v1/artifacts/job_z/out/a.txt", data=b"a")
    await client.put("/v1/artifacts/job_z/out/sub/b.txt", data=b"bb")
    await client.put("/v1/artifacts/job_z/top.txt", data=b"t")
    response = await client.get("/v1/artifacts-zip/job_z/out")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/zip"
    assert response.headers["Content-Disposition"] == 'attachment; filename="out.zip"'
    with zipfile.ZipFile(io.BytesIO(await response.get_data())) as zf:
        assert sorted(zf.namelist()) == ["a.txt", "sub/b.txt"]
        assert zf.read("sub/b.txt") == b"bb"
    assert (await client.get("/v1/artifacts-zip/job_z/top.txt")).status_code == 404
    assert (await client.get("/v1/artifacts-zip/job_none")).status_code == 404
    assert (await client.get("/v1/artifacts-zip/../job_z")).status_code == 400


async def _insert_job(app: QuartTrio, org_id: str) -> str:
    spec = JobSpec(stack="shell", image="x", mode="run", seed=1, command=["true"])
    new = repo.NewJob(
        id=new_id("job_"),
        org_id=org_id,
        project="",
        submitted_by="t",
        spec=spec,
        spec_hash="h",
        priority=100,
    )
    store = _svc(app).store
    await store.transaction(repo.insert_job(store, new))
    return new.id


async def test_artifacts_zip_of_another_orgs_job_is_404(
    app: QuartTrio, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = await _insert_job(app, "org_a")
    theirs = await _insert_job(app, "org_b")
    for job_id in (mine, theirs):
        await client.put(f"/v1/artifacts/{job_id}/out/x.txt", data=b"x")
    await client.put("/v1/artifacts/up_01anything/code.zip", data=_zip())
    monkeypatch.setattr(
        routes, "current_caller", lambda: Caller(subject="u", org_id="org_a", read_org="org_a")
    )
    assert (await client.get(f"/v1/artifacts-zip/{mine}")).status_code == 200
    foreign = await client.get(f"/v1/artifacts-zip/{theirs}")
    unknown = await client.get("/v1/artifacts-zip/job_01nonexistent0000000000000")
    assert foreign.status_code == unknown.status_code == 404
    strip = {"request_id"}
    foreign_body = {k: v for k, v in (await foreign.get_json()).items() if k not in strip}
    unknown_body = {k: v for k, v in (await unknown.get_json()).items() if k not in strip}
    assert foreign_body == unknown_body  # no existence oracle
    assert (await client.get(f"/v1/artifacts-zip/{theirs}/out")).status_code == 404
    # a prefix that is no job carries no org: only an all-orgs reader may zip it
    assert (await client.get("/v1/artifacts-zip/up_01anything")).status_code == 404
    monkeypatch.setattr(
        routes, "current_caller", lambda: Caller(subject="a", org_id="org_x", read_org=None)
    )
    assert (await client.get(f"/v1/artifacts-zip/{theirs}")).status_code == 200
    assert (await client.get("/v1/artifacts-zip/up_01anything")).status_code == 200


# --------------------------------------------------------------------------- over a socket


@pytest.fixture
async def live(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[LiveServer]:
    server = await start_server(
        nursery, e2e_settings(tmp_path / "server", max_upload_mb="4", database_url="memory")
    )
    yield server
    server.stop.set()
    await server.done.wait()


def _raw_request(url: str, head: bytes, body: bytes = b"") -> bytes:
    host, port = url.rsplit("/", 1)[-1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head + body)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


@pytest.mark.parametrize(
    "path",
    [
        "/v1/artifacts/../../etc/passwd",
        "/v1/artifacts/a/%2e%2e/%2e%2e/b",
        "/v1/artifacts/%2Fetc%2Fpasswd",
        "/v1/artifacts//etc/passwd",
        "/v1/artifacts/a%5C..%5Cb",
        "/v1/artifacts/a%00b",
    ],
)
async def test_raw_traversal_paths_are_400_over_the_wire(live: LiveServer, path: str) -> None:
    def put() -> bytes:
        head = (
            f"PUT {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nConnection: close\r\n\r\n"
        ).encode()
        return _raw_request(live.url, head, b"x")

    answer = await trio.to_thread.run_sync(put)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    # a control character is refused at the edge, for every route (input_checks.py)
    assert (b"invalid_text" if "%00" in path else b"bad_key") in answer
    assert list((live.app.extensions["runplane"].artifacts.objects).rglob("*")) == []


async def test_the_cap_is_measured_while_streaming(live: LiveServer) -> None:
    sent = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        while sent < 64 * 1024 * 1024:
            sent += 256 * 1024
            yield b"\0" * (256 * 1024)

    async with live.client() as client:
        # no Content-Length (chunked): only counting the bytes can catch it
        response = await client.put("/v1/artifacts/k/endless", content=endless())
        assert response.status_code == 413
        assert response.json()["code"] == "payload_too_large"
    assert sent < 16 * 1024 * 1024  # the server stopped reading soon after the 4 MiB cap

    def declared() -> bytes:  # declared too big: refused before any of the body is read
        head = (
            "PUT /v1/artifacts/k/declared HTTP/1.1\r\nHost: x\r\n"
            f"Content-Length: {5 * 1024 * 1024}\r\nConnection: close\r\n\r\n"
        ).encode()
        return _raw_request(live.url, head, b"x" * 1000)

    answer = await trio.to_thread.run_sync(declared)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    store = live.app.extensions["runplane"].artifacts
    assert await store.stat("k/endless") is None
    assert list(store.tmp_dir.iterdir()) == []


async def test_upload_cap_is_measured_while_streaming(live: LiveServer) -> None:
    boundary = "b0undary"

    async def body() -> AsyncIterator[bytes]:
        yield (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="big.tar.gz"\r\nContent-Type: application/gzip\r\n\r\n'
        ).encode()
        yield b"\x1f\x8b"
        for _ in range(40):
            yield b"\0" * (256 * 1024)
        yield f"\r\n--{boundary}--\r\n".encode()

    async with live.client() as client:
        response = await client.post(
            "/v1/uploads",
            content=body(),
            headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
        )
    assert response.status_code == 413
    store = live.app.extensions["runplane"].artifacts
    assert await store.list("up_") == [] or not any(
        o.key.startswith("up_") for o in await store.list("up_")
    )
    assert list(store.tmp_dir.iterdir()) == []


async def test_an_upload_cut_off_half_way_leaves_nothing(live: LiveServer) -> None:
    store = live.app.extensions["runplane"].artifacts

    def cut() -> None:
        head = b"PUT /v1/artifacts/k/cut HTTP/1.1\r\nHost: x\r\nContent-Length: 3000000\r\n\r\n"
        host, port = live.url.rsplit("/", 1)[-1].split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(head + b"x" * 1_000_000)

    await trio.to_thread.run_sync(cut)
    # The server may not have opened its temp file yet when the client is gone (it writes
    # from a worker thread): wait for it to appear (bounded), then for it to go, and for
    # the directory to stay empty a while.
    for _ in range(100):
        if list(store.tmp_dir.iterdir()):
            break
        await trio.sleep(0.02)
    empty_for = 0
    for _ in range(500):  # the server notices the disconnect and drops its temp file
        empty_for = 0 if list(store.tmp_dir.iterdir()) else empty_for + 1
        if empty_for >= 10:
            break
        await trio.sleep(0.02)
    assert list(store.tmp_dir.iterdir()) == []
    assert await store.stat("k/cut") is None


async def test_readers_racing_a_writer_see_whole_versions_only(live: LiveServer) -> None:
    versions = [bytes([97 + i]) * (1_500_000 + 1000 * i) for i in range(4)]
    digests = {hashlib.sha256(v).hexdigest() for v in versions}
    seen: list[str] = []
    writing = True
    async with live.client() as client:

        async def writer() -> None:
            nonlocal writing
            for version in versions * 3:
                response = await client.put("/v1/artifacts/k/hot", content=version)
                assert response.status_code == 201
            writing = False

        async def reader() -> None:
            while writing:
                response = await client.get("/v1/artifacts/k/hot")
                if response.status_code == 404:
                    continue  # before the first commit: nothing, never a part
                assert response.status_code == 200
                assert int(response.headers["content-length"]) == len(response.content)
                seen.append(hashlib.sha256(response.content).hexdigest())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            for _ in range(3):
                nursery.start_soon(reader)
    assert seen and set(seen) <= digests
    assert list(live.app.extensions["runplane"].artifacts.tmp_dir.iterdir()) == []


async def test_head_gives_the_size_without_the_body(live: LiveServer) -> None:
    async with live.client() as client:
        await client.put("/v1/artifacts/k/h", content=b"12345")
        head = await client.head("/v1/artifacts/k/h")
        assert head.status_code == 200
        assert head.headers["content-length"] == "5"
        assert head.content == b""
        response = await client.request("HEAD", "/v1/artifacts/k/none")
        assert response.status_code == 404


async def test_upload_over_the_wire_and_download_by_its_url(live: LiveServer) -> None:
    data = _tar_gz()
    async with live.client() as client:
        response = await client.post("/v1/uploads", files={"file": ("w.tar.gz", data)})
        assert response.status_code == 200
        url = response.json()["url"]
        assert url.startswith(live.url + "/v1/artifacts/up_")
        async with httpx.AsyncClient() as plain:
            assert (await plain.get(url)).content == data
