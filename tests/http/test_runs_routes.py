"""Run routes (RunSpec): validate, resolve, submit, list and get, over the app."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runplane.http.app import create_app
from runplane.layering import LAYERS
from runplane.settings import Settings
from tests.auth.support import ok_json

SIM = "sim-cartpole"  # config: episodes (int 1..500), max_steps (int 10..1000), policy, epsilon


async def count_jobs(client: Any) -> int:
    page = await ok_json(await client.get("/v1/jobs?paginate=1"), 200)
    return int(page["total"])


@pytest.mark.parametrize(
    "subset",
    [c for n in range(len(LAYERS) + 1) for c in itertools.combinations(LAYERS, n)],
    ids=lambda c: "+".join(c) or "none",
)
async def test_resolve_gives_provenance_and_diffs_for_every_layer_combination(
    client: Any, subset: tuple[str, ...]
) -> None:
    # every layer sets `episodes` (a shared key) and a key of its own
    own = {"platform": "max_steps", "org": "policy", "project": "epsilon", "user": None}
    values = {"platform": 100, "org": "random", "project": 0.5}
    layers: dict[str, Any] = {}
    for rank, name in enumerate(subset, start=1):
        layer: dict[str, Any] = {"episodes": rank}
        if own[name]:
            layer[own[name]] = values[name]
        layers[name] = layer
    body = {"stack": SIM, "layers": layers}
    out = await ok_json(await client.post("/v1/runs/resolve", json=body), 200)
    resolved = out["resolved"]
    assert out["validation"] == {"ok": True, "errors": [], "warnings": []}
    assert out["diff"] == resolved["layers"]
    assert [d["layer"] for d in resolved["layers"]] == list(subset)
    top = subset[-1] if subset else None
    if top:
        assert resolved["provenance"]["episodes"] == top
        assert resolved["config"]["episodes"] == len(subset)
    else:
        assert resolved["provenance"] == {} and resolved["config"]["episodes"] == 10  # default
    for name in subset:
        diff = next(d for d in resolved["layers"] if d["layer"] == name)
        expected_set = {own[name]: values[name]} if own[name] else {}
        if name == top:
            expected_set["episodes"] = len(subset)
        assert diff["set"] == expected_set, (name, diff)
        assert diff["overridden"] == ([] if name == top else ["episodes"])
        if own[name]:
            assert resolved["provenance"][own[name]] == name
            assert resolved["config"][own[name]] == values[name]
    assert await count_jobs(client) == 0


async def test_flat_config_is_the_user_layer_and_wins_over_layers_user(client: Any) -> None:
    body = {
        "stack": SIM,
        "layers": {"org": {"episodes": 5}, "user": {"episodes": 6, "max_steps": 50}},
        "config": {"episodes": 7},
    }
    resolved = (await ok_json(await client.post("/v1/runs/resolve", json=body), 200))["resolved"]
    assert resolved["config"]["episodes"] == 7 and resolved["config"]["max_steps"] == 50
    assert resolved["provenance"] == {"episodes": "user", "max_steps": "user"}
    assert resolved["layers"][0] == {"layer": "org", "set": {}, "overridden": ["episodes"]}


async def test_validate_reports_errors_with_their_layer_and_warnings(client: Any) -> None:
    body = {
        "stack": SIM,
        "layers": {"org": {"episodes": 9000, "typo": 1}, "team": {"x": 1}},
        "limits": {"cpu_cores": 500},
    }
    out = await ok_json(await client.post("/v1/runs/validate", json=body), 200)
    assert out["stack"] == SIM and out["ok"] is False
    errors = {e["key"]: e for e in out["errors"]}
    assert errors["config.episodes"]["code"] == "out_of_range"
    assert errors["config.episodes"]["layer"] == "org"
    assert errors["config.typo"]["code"] == "unknown_key"
    assert [(w["key"], w["code"]) for w in out["warnings"]] == [
        ("layers.team", "unknown_layer"),
        ("limits.cpu_cores", "clamped"),
    ]
    assert "cpu 500->128" in out["warnings"][1]["message"]
    ok = await ok_json(
        await client.post("/v1/runs/validate", json={"stack": SIM, "config": {"episodes": 3}}),
        200,
    )
    assert ok == {"stack": SIM, "ok": True, "errors": [], "warnings": []}
    assert await count_jobs(client) == 0


async def test_validate_and_resolve_answer_400_for_unknown_stack_or_bad_body(client: Any) -> None:
    for path in ("/v1/runs/validate", "/v1/runs/resolve", "/v1/runs"):
        unknown = await client.post(path, json={"stack": "nope"})
        assert unknown.status_code == 400, path
        assert (await unknown.get_json())["code"] == "unknown_stack"
        bad = await client.post(path, json={"stack": SIM, "layers": {"org": [1, 2]}})
        assert bad.status_code == 400, path
        assert (await bad.get_json())["errors"][0]["key"] == "layers"
        typo = await client.post(path, json={"stack": SIM, "layer": {}})
        assert typo.status_code == 400
    assert await count_jobs(client) == 0


async def test_resolve_is_deterministic_and_matches_the_submitted_run(client: Any) -> None:
    body = {"stack": SIM, "layers": {"project": {"episodes": 4}}, "limits": {"cpu_cores": 2}}
    first = await ok_json(await client.post("/v1/runs/resolve", json=body), 200)
    second = await ok_json(await client.post("/v1/runs/resolve", json=body), 200)
    assert first == second and first["spec_hash"]
    job = await ok_json(await client.post("/v1/runs", json=body), 202)
    assert job["run_id"] == job["job_id"] and job["clamp_notes"] == []
    assert job["spec_hash"] == first["spec_hash"]
    again = await ok_json(await client.post("/v1/runs", json=body), 202)
    assert again["job_id"] != job["job_id"] and again["spec_hash"] == job["spec_hash"]
    detail = await ok_json(await client.get(f"/v1/runs/{job['job_id']}"), 200)
    assert detail["run"] == first["resolved"]
    assert detail["has_runspec"] is True and detail["run_id"] == job["job_id"]
    assert detail["stages"] == [
        {
            "id": job["job_id"],
            "name": "main",
            "stack": SIM,
            "phase": "queued",
            "job_id": job["job_id"],
        }
    ]
    assert detail["phase"] == "queued" and detail["spec_hash"] == job["spec_hash"]


async def test_run_submit_errors(client: Any) -> None:
    bad = await client.post("/v1/runs", json={"stack": SIM, "layers": {"org": {"episodes": 0}}})
    body = await bad.get_json()
    assert bad.status_code == 422 and body["code"] == "invalid_config"
    assert body["errors"][0]["key"] == "config.episodes"
    assert await count_jobs(client) == 0


async def test_run_submit_honours_idempotency_key(client: Any) -> None:
    body = {"stack": SIM, "layers": {"org": {"episodes": 2}}}
    key = {"Idempotency-Key": "run-42"}
    first = await ok_json(await client.post("/v1/runs", json=body, headers=key), 202)
    retry = await ok_json(await client.post("/v1/runs", json=body, headers=key), 202)
    assert retry["job_id"] == first["job_id"]
    other = await client.post(
        "/v1/runs", json={**body, "layers": {"org": {"episodes": 3}}}, headers=key
    )
    assert other.status_code == 409
    assert await count_jobs(client) == 1


async def test_plain_job_is_a_run_without_runspec(client: Any) -> None:
    job = await ok_json(
        await client.post("/v1/jobs", json={"stack": SIM, "config": {"episodes": 2}}), 202
    )
    detail = await ok_json(await client.get(f"/v1/runs/{job['job_id']}"), 200)
    assert detail["has_runspec"] is False
    assert detail["run"]["provenance"] == {"episodes": "user"}
    assert detail["run"]["layers"] == [{"layer": "user", "set": {"episodes": 2}, "overridden": []}]
    assert detail["run"]["resources"] == {
        "cpu_cores": 0,
        "ram_gb": 0,
        "gpu_count": 0,
        "timeout_sec": 604800,
    }
    rerun = await ok_json(await client.post(f"/v1/jobs/{job['job_id']}/rerun"), 202)
    rerun_detail = await ok_json(await client.get(f"/v1/runs/{rerun['job_id']}"), 200)
    assert rerun_detail["run"] == detail["run"] and rerun["spec_hash"] == job["spec_hash"]
    missing = await client.get("/v1/runs/job_nope")
    assert missing.status_code == 404


async def test_list_runs_filters_and_pages(client: Any) -> None:
    ids = []
    for i in range(5):
        body = {"stack": SIM if i % 2 else "shell", "command": ["true"], "project": f"p{i % 2}"}
        if i == 4:
            body["layers"] = {"org": {}}
        ids.append((await ok_json(await client.post("/v1/runs", json=body), 202))["job_id"])
    rows = await ok_json(await client.get("/v1/runs"), 200)
    assert [r["job_id"] for r in rows] == ids[::-1]  # newest first
    assert [r["has_runspec"] for r in rows] == [True, False, False, False, False]
    assert set(rows[0]) == {
        "job_id",
        "run_id",
        "has_runspec",
        "stack",
        "phase",
        "project",
        "created_at",
    }
    assert {r["job_id"] for r in await ok_json(await client.get(f"/v1/runs?stack={SIM}"), 200)} == {
        ids[1],
        ids[3],
    }
    assert len(await ok_json(await client.get("/v1/runs?project=p0&phase=queued"), 200)) == 3
    assert await ok_json(await client.get("/v1/runs?phase=running"), 200) == []
    assert [
        r["job_id"] for r in await ok_json(await client.get("/v1/runs?limit=2&offset=1"), 200)
    ] == (ids[::-1][1:3])
    bad = await client.get("/v1/runs?phase=sleeping")
    assert bad.status_code == 400 and (await bad.get_json())["errors"][0]["key"] == "phase"
    seen, cursor = [], ""
    while True:
        page = await ok_json(await client.get(f"/v1/runs?paginate=1&limit=2&cursor={cursor}"), 200)
        seen += [r["job_id"] for r in page["items"]]
        assert page["total"] == 5
        if not page["has_more"]:
            break
        cursor = page["next_cursor"]
    assert seen == ids[::-1]


async def test_unavailable_stack_is_a_validation_error_and_a_422(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "retired.toml").write_text(
        'name = "retired"\nversion = "1"\nimage = "debian:bookworm-slim"\n'
        'default_command = ["true"]\nunavailable = true\n'
    )
    app = create_app(make_settings(stacks_dir=str(stacks)))
    async with app.test_app():
        client = app.test_client()
        out = await ok_json(await client.post("/v1/runs/validate", json={"stack": "retired"}), 200)
        assert out["ok"] is False and out["errors"][0]["code"] == "stack_unavailable"
        submit = await client.post("/v1/runs", json={"stack": "retired"})
        assert submit.status_code == 422
        pre = await ok_json(await client.get("/v1/policy/preflight?stack=retired"), 200)
        assert pre["allowed"] is False and pre["http_status"] == 422
