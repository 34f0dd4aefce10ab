"""The server's side of mounts and outputs: submit-time checks, the agent's run order, and
the ArtifactRefs a job actor accepts from an agent."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from runplane.jobs import repo
from runplane.jobs.orders import run_order
from runplane.jobs.reports import checked_artifacts
from runplane.jobs.spec import Mount, OutputSpecBody, SubmitJobBody, resolve
from runplane.stacks import load_catalog

SHA = "a" * 64


def _row(spec: dict[str, Any]) -> repo.JobRow:
    new = repo.NewJob(
        id="job_01x", org_id="o", project="", submitted_by="", spec=spec, spec_hash="", priority=0
    )
    return repo.JobRow.of(repo.new_row(new, 0))


def test_run_order_maps_mounts_and_outputs_under_the_workdir() -> None:
    body = SubmitJobBody.model_validate(
        {
            "stack": "sim-cartpole",
            "workspace": {"type": "inline", "ref": "print(1)\n", "path": "/work"},
            "inputs": [
                {"type": "git", "ref": "https://example.com/r.git#v1", "path": "/work/lib"},
                {"type": "archive", "ref": "http://h/v1/artifacts/up_1/a.zip", "path": "/data"},
                {"type": "dir", "path": "/work", "mode": "ro"},
                {"type": "file", "ref": "/etc/hostname", "path": "conf/host"},
            ],
            "outputs": [{"artifact": "m", "glob": "/work/out/*.pt"}],
        }
    )
    spec = resolve(body, load_catalog(None)).spec
    order = run_order(_row(spec), 2).spec
    assert order.inline_files == {}
    assert order.workspace is not None
    assert (order.workspace.type, order.workspace.path) == ("inline", "main.py")
    assert [(m.type, m.path, m.mode) for m in order.inputs] == [
        ("git", "lib", "rw"),
        ("archive", "data", "rw"),
        ("dir", "", "ro"),
        ("file", "conf/host", "rw"),
    ]
    # the job's own glob first, then the stack's default outputs
    assert [(o.glob, o.optional) for o in order.outputs] == [
        ("out/*.pt", False),
        ("out/trajectory.csv", False),
        ("out/summary.json", True),
    ]


@pytest.mark.parametrize(
    ("mount", "why"),
    [
        ({"path": "/work/../etc"}, "'..'"),
        ({"path": "a\\b"}, "backslash"),
        ({"path": "x\x00"}, "control"),
        ({"type": "git", "ref": ""}, "git ref"),
        ({"type": "git", "ref": "--upload-pack=evil"}, "git ref"),
        ({"type": "git", "ref": "https://h/r.git#--evil"}, "git ref"),
        ({"type": "archive", "ref": "/tmp/a.zip"}, "archive ref"),
        ({"type": "file", "ref": "ftp://x/y"}, "file ref"),
        ({"type": "dir", "ref": "relative/dir"}, "dir ref"),
    ],
)
def test_bad_mounts_are_refused(mount: dict[str, Any], why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        Mount.model_validate(mount)


def test_bad_output_globs_are_refused() -> None:
    for glob in ("../x", "/etc/*", "out/../../x"):
        with pytest.raises(ValidationError):
            OutputSpecBody.model_validate({"artifact": "a", "glob": glob})
    assert OutputSpecBody.model_validate({"artifact": "a", "glob": "/work/o/*"}).glob


def test_checked_artifacts_keeps_only_this_jobs_well_formed_refs() -> None:
    good = {"artifact": "m", "ref": "/v1/artifacts/job_01x/out/m.pt", "sha256": SHA, "size": 3}
    items = [
        good,
        {**good, "ref": "/v1/artifacts/job_01other/out/m.pt"},  # another job's key space
        {**good, "ref": "/v1/artifacts/job_01x/../job_01other/m"},
        {**good, "ref": "/v1/artifacts/job_01x/"},
        {**good, "sha256": "xyz"},
        {**good, "size": -1},
        {**good, "size": True},
        {**good, "size": "3"},
        {"artifact": "m"},
        "not a dict",
    ]
    assert checked_artifacts("job_01x", items) == [good]
    assert checked_artifacts("job_01x", None) == []
