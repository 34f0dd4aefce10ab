"""Pipeline routes over the app (no node connected: stage jobs stay queued): validation
before anything is enqueued, the views, listing, job tagging, cancel, audit, quota waits."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from runplane.http.app import create_app
from runplane.settings import Settings
from tests.auth.support import ADMIN_H, ok_json

SIM = "sim-cartpole"  # config: episodes (int 1..500)


def stage(name: str, *needs: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "needs": list(needs), "stack": "shell", "command": ["true"], **extra}


DIAMOND = {
    "name": "diamond",
    "project": "vision",
    "stages": [stage("a"), stage("b", "a"), stage("c", "a"), stage("d", "b", "c")],
}


async def counts(client: Any) -> tuple[int, int]:
    jobs = await ok_json(await client.get("/v1/jobs?paginate=1"), 200)
    runs = await ok_json(await client.get("/v1/pipelines"), 200)
    return int(jobs["total"]), len(runs)


async def test_create_launches_the_root_and_shows_every_stage(client: Any) -> None:
    run = await ok_json(await client.post("/v1/pipelines", json=DIAMOND), 202)
    assert run["pipeline_run_id"].startswith("plr_")
    assert (run["name"], run["project"], run["status"]) == ("diamond", "vision", "running")
    assert run["stage_count"] == 4 and run["started_at"] and run["finished_at"] is None
    assert run["progress"] == {
        "pending": 3,
        "queued": 1,
        "running": 0,
        "succeeded": 0,
        "failed": 0,
        "skipped": 0,
        "cancelled": 0,
    }
    a, b, _, d = run["stages"]
    assert (a["name"], a["phase"], a["stack"]) == ("a", "queued", "shell")
    assert a["job_id"].startswith("job_") and a["needs"] == [] and a["allow_failure"] is False
    assert (b["phase"], b["job_id"], b["needs"]) == ("pending", None, ["a"])
    assert d["needs"] == ["b", "c"] and d["error"] == "" and d["final_metrics"] == {}
    again = await ok_json(await client.get(f"/v1/pipelines/{run['pipeline_run_id']}"), 200)
    assert again == run
    job = await ok_json(await client.get(f"/v1/jobs/{a['job_id']}"), 200)
    assert (job["pipeline_run_id"], job["stage"]) == (run["pipeline_run_id"], "a")
    assert job["project"] == "vision"  # the pipeline's project, as the stage named none
    listed = await ok_json(await client.get(f"/v1/jobs?pipeline={run['pipeline_run_id']}"), 200)
    assert [j["job_id"] for j in listed] == [a["job_id"]]
    assert await ok_json(await client.get("/v1/jobs?pipeline=plr_other"), 200) == []
    plain = await ok_json(await client.post("/v1/jobs", json={"stack": "shell"}), 202)
    assert (plain["pipeline_run_id"], plain["stage"]) == (None, None)


async def test_list_is_newest_first_without_stages_and_pages(client: Any) -> None:
    ids = []
    for i in range(3):
        body = {"name": f"p{i}", "stages": [stage("only")]}
        ids.append(
            (await ok_json(await client.post("/v1/pipelines", json=body), 202))["pipeline_run_id"]
        )
    listed = await ok_json(await client.get("/v1/pipelines"), 200)
    assert [r["pipeline_run_id"] for r in listed] == ids[::-1]
    assert all("stages" not in r for r in listed)
    assert listed[0]["progress"]["queued"] == 1
    page = await ok_json(await client.get("/v1/pipelines?limit=1&offset=1"), 200)
    assert [r["pipeline_run_id"] for r in page] == [ids[1]]
    bad = await client.get("/v1/pipelines?limit=0")
    assert bad.status_code == 400


async def test_invalid_dags_are_400_naming_the_stages_and_enqueue_nothing(client: Any) -> None:
    before = await counts(client)
    cases = {
        "cycle": [stage("a", "c"), stage("b", "a"), stage("c", "b")],
        "unknown_dependency": [stage("a", "ghost")],
        "duplicate_name": [stage("a"), stage("a")],
        "empty_name": [stage("")],
        "unknown_reference": [stage("a"), stage("b", command=["echo", "{{stages.a.job_id}}"])],
    }
    for code, stages in cases.items():
        problem = await ok_json(await client.post("/v1/pipelines", json={"stages": stages}), 400)
        assert problem["code"] == "invalid_pipeline"
        assert [e["code"] for e in problem["errors"]] == [code], problem
        assert problem["errors"][0]["key"].startswith("stages[")
    cycle = await ok_json(await client.post("/v1/pipelines", json={"stages": cases["cycle"]}), 400)
    assert "a -> c -> b -> a" in cycle["detail"]
    assert await counts(client) == before


async def test_a_bad_stage_is_422_keyed_by_stage_and_enqueues_nothing(client: Any) -> None:
    before = await counts(client)
    body = {
        "stages": [
            stage("ok"),
            {"name": "train", "needs": ["ok"], "stack": SIM, "config": {"episodes": 9999}},
            {"name": "ghost", "stack": "no-such-stack"},
        ]
    }
    problem = await ok_json(await client.post("/v1/pipelines", json=body), 422)
    assert problem["code"] == "invalid_stage"
    keys = {(e["key"], e["code"]) for e in problem["errors"]}
    assert ("stages.train.config.episodes", "out_of_range") in keys, keys
    assert ("stages.ghost.stack", "unknown_stack") in keys, keys
    assert await counts(client) == before


async def test_validate_reports_topology_and_each_stage_without_enqueuing(client: Any) -> None:
    before = await counts(client)
    good = await ok_json(await client.post("/v1/pipelines/validate", json=DIAMOND), 200)
    assert good["ok"] is True and good["errors"] == []
    assert [(s["name"], s["stack"], s["validation"]["ok"]) for s in good["stages"]] == [
        ("a", "shell", True),
        ("b", "shell", True),
        ("c", "shell", True),
        ("d", "shell", True),
    ]
    body = {
        "stages": [
            stage("a", "b"),
            stage("b", "a"),
            {"name": "sim", "stack": SIM, "config": {"episodes": 0}},
        ]
    }
    bad = await ok_json(await client.post("/v1/pipelines/validate", json=body), 200)
    assert bad["ok"] is False
    assert [e["code"] for e in bad["errors"]] == ["cycle"]
    sim = bad["stages"][2]["validation"]
    assert sim["ok"] is False and sim["errors"][0]["key"] == "config.episodes"
    malformed = await client.post("/v1/pipelines/validate", json={"stages": "nope"})
    assert malformed.status_code == 400
    unknown_field = await client.post("/v1/pipelines/validate", json={"stagez": []})
    assert unknown_field.status_code == 400
    assert await counts(client) == before


async def test_cancel_cancels_the_queued_stage_job_and_the_pending_stages(client: Any) -> None:
    run = await ok_json(await client.post("/v1/pipelines", json=DIAMOND), 202)
    run_id = run["pipeline_run_id"]
    cancelled = await ok_json(await client.post(f"/v1/pipelines/{run_id}/cancel"), 200)
    assert cancelled["status"] == "cancelled" and cancelled["finished_at"]
    assert [s["phase"] for s in cancelled["stages"]] == ["cancelled"] * 4
    job = await ok_json(await client.get(f"/v1/jobs/{run['stages'][0]['job_id']}"), 200)
    assert job["phase"] == "cancelled"
    again = await ok_json(await client.post(f"/v1/pipelines/{run_id}/cancel"), 200)
    assert again["status"] == "cancelled"
    trail = await ok_json(await client.get("/v1/admin/audit", headers=ADMIN_H), 200)
    mine = [(r["action"], r["resource_type"]) for r in trail if r["resource_id"] == run_id]
    assert ("pipelines:create", "pipeline") in mine and ("pipelines:cancel", "pipeline") in mine


async def test_unknown_ids_are_404(client: Any) -> None:
    for method, url in (
        ("GET", "/v1/pipelines/plr_nope"),
        ("POST", "/v1/pipelines/plr_nope/cancel"),
    ):
        response = await client.open(url, method=method)
        assert response.status_code == 404, url


async def test_a_stage_the_quota_refuses_waits_with_a_reason_then_launches(client: Any) -> None:
    put = await client.put("/v1/policy", json={"org": {"max_concurrent_org": 1}}, headers=ADMIN_H)
    assert put.status_code == 200, await put.get_data()
    body = {"stages": [stage("first"), stage("second")]}
    run = await ok_json(await client.post("/v1/pipelines", json=body), 202)
    # the two roots launch together: one takes the slot, the other waits with the reason
    by_phase = {s["phase"]: s for s in run["stages"]}
    assert set(by_phase) == {"queued", "pending"}, run["stages"]
    running, waiting = by_phase["queued"], by_phase["pending"]
    assert waiting["job_id"] is None and "limit is 1" in waiting["wait_reason"], waiting
    assert run["status"] == "running"
    # the running stage's job ends (cancelled by hand): its slot frees, the other launches
    await ok_json(await client.post(f"/v1/jobs/{running['job_id']}/cancel"), 200)
    stages: dict[str, Any] = {}
    with trio.move_on_after(10):  # the pipeline actor hears of it just after the cancel
        while stages.get(waiting["name"], {}).get("phase") != "queued":
            await trio.sleep(0.02)
            view = await ok_json(await client.get(f"/v1/pipelines/{run['pipeline_run_id']}"), 200)
            stages = {s["name"]: s for s in view["stages"]}
    assert stages[running["name"]]["phase"] == "cancelled"
    assert stages[waiting["name"]]["phase"] == "queued", stages
    assert "wait_reason" not in stages[waiting["name"]]


async def test_disabled_pipelines_answer_503(make_settings: Callable[..., Settings]) -> None:
    app = create_app(make_settings(disable="pipelines"))
    async with app.test_app():
        client = app.test_client()
        for method, url, body in (
            ("POST", "/v1/pipelines", DIAMOND),
            ("GET", "/v1/pipelines", None),
            ("POST", "/v1/pipelines/validate", DIAMOND),
            ("GET", "/v1/pipelines/plr_x", None),
            ("POST", "/v1/pipelines/plr_x/cancel", None),
        ):
            response = await client.open(url, method=method, json=body)
            assert response.status_code == 503, url
            assert (await response.get_json())["code"] == "feature_disabled"


async def test_the_example_in_the_docs_validates(client: Any) -> None:
    text = (Path(__file__).parents[2] / "docs" / "pipelines.md").read_text()
    example = json.loads(text.split("```json", 1)[1].split("```", 1)[0])
    checked = await ok_json(await client.post("/v1/pipelines/validate", json=example), 200)
    assert checked["ok"] is True, checked
    run = await ok_json(await client.post("/v1/pipelines", json=example), 202)
    assert [s["phase"] for s in run["stages"]] == ["queued"] + ["pending"] * 4
