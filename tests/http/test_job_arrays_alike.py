"""Job arrays worked out once per distinct body (runplane/jobs/alike.py, ``fast_batch``,
``JobArrays._plan``): every job of a batch is the job its body makes when submitted alone,
and a batch's body parses to the model the full validation makes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from quart_trio import QuartTrio

from runplane.http.bodies import validate_body
from runplane.jobs.alike import Alike
from runplane.jobs.arrays import BatchBody, fast_batch
from runplane.jobs.jobspec import JobSpec, spec_hash
from runplane.problems import Problem


@pytest.fixture
def app(durable_app: QuartTrio) -> QuartTrio:
    return durable_app


SHELL = {"stack": "shell", "command": ["true"], "project": "p"}
CARTPOLE = {"stack": "sim-cartpole", "config": {"episodes": 3, "epsilon": 0.5}}
ITEMS: list[dict[str, Any]] = [
    {**SHELL, "seed": 0},
    {**SHELL, "seed": 1},
    SHELL,  # its default seed, derived from its hash
    {**SHELL, "seed": None},
    SHELL,
    {**SHELL, "seed": 1},
    {**CARTPOLE, "seed": 7},
    {**CARTPOLE, "seed": 8},
    CARTPOLE,
    {"stack": "shell", "limits": {"cpu_cores": 100000}, "seed": 3},  # clamped
    {"stack": "shell", "limits": {"cpu_cores": 100000}, "seed": 4},
    {"stack": "shell", "env": {"API_TOKEN": "tok-0123456789abcdef"}, "seed": 5},  # sealed
    {"stack": "shell", "env": {"API_TOKEN": "tok-0123456789abcdef"}, "seed": 6},
    {"stack": "shell", "priority": 5, "seed": 9, "retry": {"limit": 2}},
]
#: what differs between two jobs made from one body: who they are, when, and their array
APART = {"job_id", "id", "created_at", "updated_at", "array_id", "array_index", "links"}


def _same(view: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in view.items() if k not in APART}


async def test_each_job_of_a_batch_is_the_job_its_body_makes_alone(client: Any) -> None:
    response = await client.post("/v1/jobs/batch", json={"jobs": ITEMS})
    assert response.status_code == 202, await response.get_data()
    created = (await response.get_json())["jobs"]
    assert len(created) == len(ITEMS)
    for item, made in zip(ITEMS, created, strict=True):
        alone = await client.post("/v1/jobs", json=item)
        assert alone.status_code in (201, 202), await alone.get_data()
        single = await (
            await client.get(f"/v1/jobs/{(await alone.get_json())['job_id']}")
        ).get_json()
        arrayed = await (await client.get(f"/v1/jobs/{made['job_id']}")).get_json()
        assert made["spec_hash"] == single["spec_hash"], item
        assert _same(arrayed) == _same(single), item
    # the clamp's notes are the ones a single submit gets
    assert created[9]["clamp_notes"] and created[9]["clamp_notes"] == created[10]["clamp_notes"]
    hashes = [c["spec_hash"] for c in created]
    assert hashes[1] == hashes[5] and hashes[2] == hashes[3] == hashes[4]
    assert len({hashes[0], hashes[1], hashes[2]}) == 3


async def test_a_sweep_makes_the_jobs_its_items_make_alone(client: Any) -> None:
    body = {"job": CARTPOLE, "sweep": {"episodes": [1, 2], "max_steps": [10, 20]}}
    created = (await (await client.post("/v1/jobs/batch", json=body)).get_json())["jobs"]
    for made, (episodes, steps) in zip(created, [(1, 10), (1, 20), (2, 10), (2, 20)], strict=True):
        config = {**CARTPOLE["config"], "episodes": episodes, "max_steps": steps}
        alone = await (
            await client.post("/v1/jobs", json={**CARTPOLE, "config": config})
        ).get_json()
        single = await (await client.get(f"/v1/jobs/{alone['job_id']}")).get_json()
        arrayed = await (await client.get(f"/v1/jobs/{made['job_id']}")).get_json()
        assert _same(arrayed) == _same(single)


async def test_a_sweeps_bad_values_are_refused_as_when_sent_alone(client: Any) -> None:
    body = {"job": {**CARTPOLE, "seed": 2}, "sweep": {"episodes": [1, -5, 2, -7]}}
    body["atomic"] = False
    answer = await (await client.post("/v1/jobs/batch", json=body)).get_json()
    assert [j["index"] for j in answer["jobs"]] == [0, 2]
    assert [r["index"] for r in answer["rejected"]] == [1, 3]
    for rejected, episodes in zip(answer["rejected"], (-5, -7), strict=True):
        config = {**CARTPOLE["config"], "episodes": episodes}
        alone = await client.post("/v1/jobs", json={**CARTPOLE, "seed": 2, "config": config})
        problem = await alone.get_json()
        assert rejected["status"] == alone.status_code == 422
        assert (rejected["code"], rejected["detail"]) == (problem["code"], problem["detail"])
        assert rejected["errors"] == problem["errors"]
    for made in answer["jobs"]:
        job = await (await client.get(f"/v1/jobs/{made['job_id']}")).get_json()
        assert job["seed"] == 2


BODIES: list[dict[str, Any]] = [
    {"jobs": ITEMS},
    {"jobs": ITEMS, "atomic": False},
    {"jobs": [SHELL] * 3},
    {"jobs": [{"stack": "shell", "seed": 2**63 - 1}, {"stack": "shell", "seed": 0}]},
]
REFUSED: list[dict[str, Any]] = [
    {"jobs": [SHELL, {"stack": "shell", "seed": True}]},
    {"jobs": [SHELL, {"stack": "shell", "seed": -1}]},
    {"jobs": [SHELL, {"stack": "shell", "seed": "3"}]},
    {"jobs": [SHELL, {"stack": "shell", "limits": 3}]},
    {"jobs": [SHELL, {"stack": "shell", "colour": "red"}]},
    {"jobs": [SHELL, 3]},
    {"jobs": [SHELL], "atomic": 1},
    {"jobs": []},
    {"jobs": [SHELL] * 1001},
    {"jobs": [SHELL], "job": SHELL},
]


@pytest.mark.parametrize("body", BODIES)
def test_fast_batch_parses_as_the_full_validation(body: dict[str, Any]) -> None:
    fast, full = fast_batch(body), validate_body(BatchBody, body)
    assert fast is not None and fast == full
    assert fast.model_fields_set == full.model_fields_set
    assert fast.jobs is not None and full.jobs is not None
    for a, b in zip(fast.jobs, full.jobs, strict=True):
        assert a.model_fields_set == b.model_fields_set and a.model_dump() == b.model_dump()


@pytest.mark.parametrize("body", REFUSED)
def test_fast_batch_leaves_every_fault_to_the_full_validation(body: dict[str, Any]) -> None:
    assert fast_batch(body) is None
    with pytest.raises(Problem):
        validate_body(BatchBody, body)


def _spec(**fields: Any) -> JobSpec:
    return JobSpec.model_validate(
        {"stack": "shell", "image": "debian", "command": ["true"], **fields}
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"seed": 3},
        {},  # no seed stored: none hashed
        {"seed": 0, "config": {"seed": 5, "note": '"seed":'}},
        {"seed": 2**63 - 1, "env": {"seed": "seed-0"}, "nodes": 2},
    ],
)
def test_the_shared_part_hashed_and_encoded_once_gives_each_spec_its_own(
    fields: dict[str, Any],
) -> None:
    alike = Alike()
    first = _spec(**fields)
    copies = [first, *(first.model_copy(update={"seed": s}) for s in (0, 1, 12345, 2**40))]
    configs = ({"seed": 1, "a": [1.5, None]}, {}, {"z": {"y": '\u00e9"seed":'}}, {"t": (1, 2)})
    copies += [first.model_copy(update={"config": c}) for c in configs]
    copies += [first.model_copy(update={"config": c, "seed": 9}) for c in configs]
    for spec in copies:
        assert alike.spec_hash(spec) == spec_hash(spec)
        assert _whole(alike, spec) == spec.stored_json()
    assert alike.spec_hash(first) == spec_hash(first)  # again, from the memo
    assert _whole(alike, first) == first.stored_json()


def _whole(alike: Alike, spec: JobSpec) -> str:
    """The stored text of ``spec`` as a row read back puts it together (``repo.SPEC``)."""
    text, part = alike.stored(spec)
    return text if part is None else part.whole(text, spec.seed)


def test_the_clamped_limits_are_made_once_and_the_same() -> None:
    alike = Alike()
    first = _spec(limits={"cpu_cores": 64, "ram_gb": 8})
    for spec in (first, first.model_copy(update={"seed": 2})):
        for limits in ({"cpu_cores": 4}, {"cpu_cores": 64, "ram_gb": 8}, {"ram_gb": None}):
            mine, theirs = alike.with_limits(spec, limits), spec.with_limits(limits)
            assert mine == theirs and mine.stored() == theirs.stored()


async def test_an_array_stores_its_shared_spec_once_and_reads_back_whole(app: QuartTrio) -> None:
    """Migration 0031: the items of one shape store the shape's part once and their own
    config (and seed) only; every reader puts the same whole spec back together."""
    from runplane.jobs import repo
    from runplane.nodes import repo as nodes_repo

    client = app.test_client()
    ids = []
    for body in (
        {"jobs": [{**SHELL, "seed": n} for n in range(5)]},
        {"job": {**CARTPOLE, "seed": 1}, "sweep": {"episodes": [1, 2, 3, 4]}},
    ):
        response = await client.post("/v1/jobs/batch", json=body)
        assert response.status_code == 202, await response.get_data()
        ids += [j["job_id"] for j in (await response.get_json())["jobs"]]
    store = app.extensions["runplane"].store
    sql = "SELECT id, spec, spec_part, seed FROM jobs"
    raw = {r["id"]: r for r in await store.fetchall(sql, ())}
    parts = await store.fetchall("SELECT * FROM job_spec_parts", ())
    # the first item of each shape is stored whole; the others name their shape's part
    stored_whole = [raw[i]["spec_part"] is None for i in ids]
    assert stored_whole == [True] + [False] * 4 + [True] + [False] * 3, str(stored_whole)
    assert len(parts) == 2 and len({raw[i]["spec_part"] for i in ids[1:5]}) == 1
    # a shell item: its config's JSON alone (its seed is in its own column)
    assert len({raw[i]["spec"] for i in ids[1:5]}) == 1 and len(raw[ids[1]]["spec"]) < 80
    # a sweep's item: its own config's JSON, the rest in the part
    assert [json.loads(raw[i]["spec"])["episodes"] for i in ids[6:]] == [2, 3, 4]
    # every reader: the one row, a list, the live rows, the node view
    whole = {}
    for job_id in ids:
        row = await repo.get_row(store, job_id, None)
        assert row is not None and row.spec.seed == raw[job_id]["seed"]
        assert JobSpec.load(row.spec.stored_json()) == row.spec
        whole[job_id] = row.spec
    assert [whole[i].config["episodes"] for i in ids[5:]] == [1, 2, 3, 4]
    listed = {r.id: r.spec for r in await repo.list_rows(store, repo.JobFilter(), limit=100)}
    live = {r.id: r.spec for r in await repo.live_rows(store)}
    assert all(listed[i] == live[i] == whole[i] for i in ids)
    update = "UPDATE jobs SET node_id = 'node_x', phase = 'running' WHERE id = ?"
    await store.execute(update, (ids[3],))
    [on_node] = (await nodes_repo.jobs_on(store, ["node_x"]))["node_x"]
    assert on_node.spec == whole[ids[3]]
