"""Job arrays (POST /v1/jobs/batch, /v1/arrays/{id}): batches and sweeps admitted and
written in one transaction, all-or-nothing, listed and cancelled as a whole."""

from __future__ import annotations

import json
from typing import Any

import pytest
from quart_trio import QuartTrio

from runplane.jobs import repo
from tests.auth.support import ADMIN_H


@pytest.fixture
def app(durable_app: QuartTrio) -> QuartTrio:
    """On each durable backend; the ``client`` fixture serves it."""
    return durable_app


async def batch(client: Any, body: dict[str, Any], **headers: str) -> Any:
    return await client.post("/v1/jobs/batch", json=body, headers=headers)


async def count_jobs(app: Any) -> int:
    store = app.extensions["runplane"].store
    return await repo.count_rows(store, repo.JobFilter())


async def test_a_batch_creates_every_job_with_its_own_id_and_hash(app: Any, client: Any) -> None:
    items = [{"stack": "shell", "command": ["echo", str(i)], "seed": i} for i in range(5)]
    response = await batch(client, {"jobs": items})
    assert response.status_code == 202, await response.get_data()
    body = await response.get_json()
    assert body["array_id"].startswith("arr_") and body["count"] == 5
    assert [j["index"] for j in body["jobs"]] == [0, 1, 2, 3, 4]
    assert len({j["job_id"] for j in body["jobs"]}) == 5
    assert len({j["spec_hash"] for j in body["jobs"]}) == 5  # different commands and seeds
    assert body["rejected"] == [] and {j["phase"] for j in body["jobs"]} == {"queued"}
    # each job is an ordinary job that names its array and index
    first = await (await client.get(f"/v1/jobs/{body['jobs'][3]['job_id']}")).get_json()
    assert first["array_id"] == body["array_id"] and first["array_index"] == 3
    assert first["spec"]["command"] == ["echo", "3"] and first["seed"] == 3
    assert first["spec_hash"] == body["jobs"][3]["spec_hash"]
    # the array's jobs list with ?array=, and only them
    await client.post("/v1/jobs", json={"stack": "shell"})
    listed = await (await client.get(f"/v1/jobs?array={body['array_id']}")).get_json()
    assert sorted(j["job_id"] for j in listed) == sorted(j["job_id"] for j in body["jobs"])
    page = await (
        await client.get(f"/v1/jobs?array={body['array_id']}&paginate=1&limit=2")
    ).get_json()
    assert len(page["items"]) == 2 and page["has_more"] is True
    array = await (await client.get(f"/v1/arrays/{body['array_id']}")).get_json()
    assert array["count"] == 5 and array["phases"] == {"queued": 5} and array["sweep"] is None
    # the same body again is a new array (no Idempotency-Key)
    again = await (await batch(client, {"jobs": items})).get_json()
    assert again["array_id"] != body["array_id"]
    assert [j["spec_hash"] for j in again["jobs"]] == [j["spec_hash"] for j in body["jobs"]]
    assert await count_jobs(app) == 11


async def test_a_sweep_expands_as_a_grid_over_the_config(client: Any) -> None:
    sweep = {"episodes": [1, 2, 3], "epsilon": [0.1, 0.5]}
    body = {"job": {"stack": "sim-cartpole", "config": {"max_steps": 50}}, "sweep": sweep}
    created = await (await batch(client, body)).get_json()
    assert created["count"] == 6
    configs = []
    for item in created["jobs"]:
        job = await (await client.get(f"/v1/jobs/{item['job_id']}")).get_json()
        configs.append(job["spec"]["config"])
    # the first key varies slowest; the template's own config is kept under each
    assert [(c["episodes"], c["epsilon"]) for c in configs] == [
        (1, 0.1),
        (1, 0.5),
        (2, 0.1),
        (2, 0.5),
        (3, 0.1),
        (3, 0.5),
    ]
    assert {c["max_steps"] for c in configs} == {50}
    array = await (await client.get(f"/v1/arrays/{created['array_id']}")).get_json()
    assert array["sweep"] == sweep


async def test_one_bad_item_refuses_the_whole_batch_naming_it(app: Any, client: Any) -> None:
    items = [
        {"stack": "sim-cartpole", "config": {"episodes": 3}},
        {"stack": "sim-cartpole", "config": {"episodes": -5}},
        {"stack": "sim-cartpole", "config": {"episodes": 2}},
        {"stack": "sim-cartpole", "config": {"episodes": 1, "colour": "red"}},
    ]
    response = await batch(client, {"jobs": items})
    assert response.status_code == 422
    problem = await response.get_json()
    assert problem["code"] == "invalid_batch" and "2 of the batch's 4 jobs" in problem["detail"]
    keys = {e["key"] for e in problem["errors"]}
    assert "jobs.1.config.episodes" in keys and "jobs.3.config.colour" in keys, keys
    assert not any(k.startswith(("jobs.0.", "jobs.2.")) for k in keys)
    assert await count_jobs(app) == 0  # nothing was created
    # a malformed item is a 400 naming its place in the list
    shape = await batch(client, {"jobs": [{"stack": "shell"}, {"stack": "shell", "limits": 3}]})
    assert shape.status_code == 400
    assert any(e["key"].startswith("jobs.1.limits") for e in (await shape.get_json())["errors"])
    # an unknown stack in one item: 400, nothing created
    unknown = await batch(client, {"jobs": [{"stack": "shell"}, {"stack": "nope"}]})
    assert unknown.status_code == 400, await unknown.get_data()
    assert any(e["key"].startswith("jobs.1") for e in (await unknown.get_json())["errors"])
    assert await count_jobs(app) == 0


async def test_atomic_false_creates_the_valid_items_and_lists_the_rest(client: Any) -> None:
    items = [
        {"stack": "sim-cartpole", "config": {"episodes": 3}},
        {"stack": "sim-cartpole", "config": {"episodes": -5}},
        {"stack": "sim-cartpole", "config": {"episodes": 2}},
    ]
    response = await batch(client, {"jobs": items, "atomic": False})
    assert response.status_code == 202
    body = await response.get_json()
    assert [j["index"] for j in body["jobs"]] == [0, 2] and body["count"] == 2
    [rejected] = body["rejected"]
    assert rejected["index"] == 1 and rejected["status"] == 422
    assert any(e["key"] == "config.episodes" for e in rejected["errors"])


async def test_the_body_takes_one_shape(client: Any) -> None:
    for body, fragment in (
        ({}, "either"),
        ({"jobs": [], "atomic": True}, "jobs"),
        ({"jobs": [{"stack": "shell"}], "job": {"stack": "shell"}}, "either"),
        ({"job": {"stack": "shell"}}, "sweep"),
        ({"jobs": [{"stack": "shell"}], "sweep": {"episodes": [1]}}, "sweep"),
        (
            {"job": {"stack": "shell"}, "sweep": {"a": list(range(40)), "b": list(range(40))}},
            "1600",
        ),
        ({"jobs": [{"stack": "shell"}] * 1001}, "jobs"),
    ):
        response = await batch(client, body)
        assert response.status_code == 400, body
        assert fragment in json_text(await response.get_json()), (body, await response.get_json())


def json_text(value: Any) -> str:
    return json.dumps(value)


async def test_a_batch_over_the_quota_is_429_saying_how_many_fit(app: Any, client: Any) -> None:
    put = await client.put("/v1/policy", json={"org": {"max_concurrent_org": 5}}, headers=ADMIN_H)
    assert put.status_code == 200, await put.get_data()
    await client.post("/v1/jobs", json={"stack": "shell"})
    await client.post("/v1/jobs", json={"stack": "shell"})
    response = await batch(client, {"jobs": [{"stack": "shell"}] * 4})
    assert response.status_code == 429
    problem = await response.get_json()
    assert problem["code"] == "quota_exceeded"
    assert "Of this batch's 4 jobs, 3 fit now" in problem["detail"], problem
    assert await count_jobs(app) == 2  # all or nothing
    # nothing stays reserved: three fit
    fits = await batch(client, {"jobs": [{"stack": "shell"}] * 3})
    assert fits.status_code == 202, await fits.get_data()
    usage = await (await client.get("/v1/me/entitlements")).get_json()
    assert usage["usage"]["queued"] == 5 and usage["remaining"]["org_concurrent"] == 0, usage


async def test_an_idempotent_batch_replays_the_same_array(app: Any, client: Any) -> None:
    body = {"jobs": [{"stack": "shell"}, {"stack": "shell", "seed": 4}]}
    first = await (await batch(client, body, **{"Idempotency-Key": "sweep-1"})).get_json()
    again = await batch(client, body, **{"Idempotency-Key": "sweep-1"})
    assert again.status_code == 202
    replay = await again.get_json()
    assert replay["array_id"] == first["array_id"]
    assert [j["job_id"] for j in replay["jobs"]] == [j["job_id"] for j in first["jobs"]]
    assert await count_jobs(app) == 2
    other = await batch(client, {"jobs": [{"stack": "shell"}]}, **{"Idempotency-Key": "sweep-1"})
    assert other.status_code == 409


async def test_cancel_reaches_every_live_job_of_the_array(client: Any) -> None:
    created = await (await batch(client, {"jobs": [{"stack": "shell"}] * 4})).get_json()
    one = created["jobs"][0]["job_id"]
    await client.post(f"/v1/jobs/{one}/cancel")
    response = await client.post(f"/v1/arrays/{created['array_id']}/cancel")
    assert response.status_code == 200
    assert await response.get_json() == {
        "array_id": created["array_id"],
        "cancelled": 3,
        "not_cancelled": 1,
    }
    array = await (await client.get(f"/v1/arrays/{created['array_id']}")).get_json()
    assert array["phases"] == {"cancelled": 4}
    assert (await client.get("/v1/arrays/arr_nope")).status_code == 404
    assert (await client.post("/v1/arrays/arr_nope/cancel")).status_code == 404
