"""Outputs on the agent: glob matching in the workdir and uploads to a served app."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from runplane.agent import outputs as out
from runplane.agent.outputs import _match, _segments, collect_outputs, match_outputs, normalize_glob
from runplane.agent.protocol import OutputGlob
from tests.artifacts.bytes import get_bytes
from tests.e2e.conftest import LiveServer, e2e_settings, start_server


def glob_matches(glob: str, rel: str) -> bool:
    """Whether the relative path ``rel`` matches ``glob`` (as output globs are matched)."""
    return _match(_segments(normalize_glob(glob)), tuple(rel.split("/")))


@pytest.mark.parametrize(
    ("glob", "path", "hit"),
    [
        ("out/*.csv", "out/a.csv", True),
        ("out/*.csv", "out/sub/a.csv", False),
        ("out/**/*.csv", "out/a.csv", True),
        ("out/**/*.csv", "out/x/y/a.csv", True),
        ("**/*.pt", "model.pt", True),
        ("**/*.pt", "a/b/c/model.pt", True),
        ("**", "anything/at/all", True),
        ("/work/out/*.txt", "out/a.txt", True),
        ("./out/?.txt", "out/a.txt", True),
        ("./out/?.txt", "out/ab.txt", False),
        ("out/[ab].txt", "out/b.txt", True),
        ("out/[ab].txt", "out/c.txt", False),
        ("*.log", ".hidden.log", True),
        ("out/*", "out", False),
        ("OUT/*", "out/a", False),
    ],
)
def test_glob_matching(glob: str, path: str, hit: bool) -> None:
    assert glob_matches(glob, path) is hit


def _tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def test_match_outputs(tmp_path: Path) -> None:
    work = tmp_path / "work"
    _tree(
        work,
        {
            "out/a.csv": b"a",
            "out/deep/b.csv": b"bb",
            "ckpt/1/model.pt": b"m1",
            "ckpt/2/model.pt": b"m2",
            "notes.txt": b"n",
        },
    )
    (work / "out" / "latest.csv").symlink_to("a.csv")  # inside: uploaded (its target)
    (work / "out" / "secret.csv").symlink_to("/etc/hostname")  # outside: skipped
    (work / "linkdir").symlink_to(tmp_path)  # a symlinked directory is not walked
    matched = match_outputs(
        work,
        [
            OutputGlob(artifact="csv", glob="out/**/*.csv"),
            OutputGlob(artifact="ckpt", glob="ckpt"),  # a directory: everything under it
            OutputGlob(artifact="again", glob="out/a.csv"),  # already taken by "csv"
            OutputGlob(artifact="gone", glob="missing/*.bin"),
            OutputGlob(artifact="maybe", glob="maybe/*", optional=True),
            OutputGlob(artifact="up", glob="linkdir/**"),
        ],
    )
    got = {(f.artifact, f.rel, f.size) for f in matched.files}
    assert got == {
        ("csv", "out/a.csv", 1),
        ("csv", "out/deep/b.csv", 2),
        ("csv", "out/latest.csv", 1),
        ("ckpt", "ckpt/1/model.pt", 2),
        ("ckpt", "ckpt/2/model.pt", 2),
    }
    assert matched.missing == ["missing/*.bin", "linkdir/**"]
    assert any("out/secret.csv skipped" in n for n in matched.notes)
    assert matched.error is None


def test_too_many_files_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(out, "MAX_OUTPUT_FILES", 3)
    _tree(tmp_path, {f"f{i}.txt": b"x" for i in range(5)})
    matched = match_outputs(tmp_path, [OutputGlob(artifact="all", glob="*.txt")])
    assert matched.error is not None and "more than 3 files" in matched.error


@pytest.fixture
async def live(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[LiveServer]:
    server = await start_server(
        nursery, e2e_settings(tmp_path / "server", database_url="memory", max_upload_mb="2")
    )
    yield server
    server.stop.set()
    await server.done.wait()


async def test_collect_outputs_uploads_and_reports_refs(live: LiveServer, tmp_path: Path) -> None:
    work = tmp_path / "work"
    blob = os.urandom(1_500_000)
    _tree(work, {"out/model.bin": blob, "out/with space.txt": b"s", "out/empty": b""})
    notes: list[str] = []

    async def note(line: str) -> None:
        notes.append(line)

    refs, error = await collect_outputs(
        work,
        [OutputGlob(artifact="model", glob="out/*")],
        live.url,
        "job_01test",
        note=note,
    )
    assert error is None
    by_ref = {r["ref"]: r for r in refs}
    assert by_ref["/v1/artifacts/job_01test/out/model.bin"] == {
        "artifact": "model",
        "ref": "/v1/artifacts/job_01test/out/model.bin",
        "sha256": hashlib.sha256(blob).hexdigest(),
        "size": len(blob),
    }
    assert "/v1/artifacts/job_01test/out/with%20space.txt" in by_ref
    assert by_ref["/v1/artifacts/job_01test/out/empty"]["size"] == 0
    store = live.app.extensions["runplane"].artifacts
    assert await get_bytes(store, "job_01test/out/model.bin") == blob
    assert await get_bytes(store, "job_01test/out/with space.txt") == b"s"
    assert notes and notes[-1].startswith("uploaded 3 output files")


async def test_an_upload_over_the_cap_is_an_error_naming_the_file(
    live: LiveServer, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    _tree(work, {"big.bin": b"x" * (3 * 1024 * 1024), "small.txt": b"s"})
    refs, error = await collect_outputs(
        work, [OutputGlob(artifact="x", glob="*")], live.url, "job_01cap"
    )
    assert error is not None and "big.bin" in error and "413" in error
    assert [r["ref"] for r in refs] == ["/v1/artifacts/job_01cap/small.txt"]
    store = live.app.extensions["runplane"].artifacts
    assert await store.stat("job_01cap/big.bin") is None


async def test_server_unreachable_is_an_error(tmp_path: Path) -> None:
    _tree(tmp_path, {"a.txt": b"a"})
    refs, error = await collect_outputs(
        tmp_path, [OutputGlob(artifact="x", glob="a.txt")], "http://127.0.0.1:9", "job_01x"
    )
    assert refs == [] and error is not None and "a.txt" in error


async def test_missing_required_glob_names_it(tmp_path: Path) -> None:
    refs, error = await collect_outputs(
        tmp_path,
        [OutputGlob(artifact="m", glob="out/*.pt"), OutputGlob(artifact="n", glob="x/*")],
        "http://127.0.0.1:9",
        "job_01x",
    )
    assert refs == [] and error == "output globs 'out/*.pt', 'x/*' matched no files"
