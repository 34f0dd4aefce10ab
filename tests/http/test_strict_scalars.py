"""Strict scalars at the edge (issue 37, docs/api.md "Strict scalars"): a body field takes
the JSON type it declares and nothing converted to it, and a query parameter the text of
its type; each refusal is a 400 ``bad_type`` naming the field. Stored specs, read back by
the same models, still load."""

from __future__ import annotations

from typing import Any

import pytest

from runplane.jobs.jobspec import JobSpec

SHELL = {"stack": "shell", "command": ["true"]}


async def refused(response: Any, key: str) -> dict[str, Any]:
    body = await response.get_json()
    assert response.status_code == 400, body
    assert body["code"] == "bad_type", body
    assert [e["key"] for e in body["errors"]] == [key], body
    assert body["errors"][0]["code"] == "bad_type"
    assert key in body["detail"]
    return dict(body)


@pytest.mark.parametrize(
    ("patch", "key"),
    [
        # an integer refuses a boolean, a float (with a fraction or not) and a string
        ({"limits": {"timeout_sec": True}}, "limits.timeout_sec"),
        ({"limits": {"cpu_cores": False}}, "limits.cpu_cores"),
        ({"limits": {"ram_gb": 1.5}}, "limits.ram_gb"),
        ({"limits": {"gpu_count": 2.0}}, "limits.gpu_count"),
        ({"priority": "7"}, "priority"),
        ({"seed": True}, "seed"),
        ({"requires": {"cpu": {"min_cores": "4"}}}, "requires.cpu.min_cores"),
        # a boolean refuses 0/1 and strings
        ({"limits": {"no_internet": 1}}, "limits.no_internet"),
        ({"limits": {"no_internet": 0}}, "limits.no_internet"),
        ({"limits": {"no_internet": "true"}}, "limits.no_internet"),
        ({"requires": {"gpu": {"required": "yes"}}}, "requires.gpu.required"),
        # a number refuses a boolean and a string
        ({"weights": {"gpu_fit": True}}, "weights.gpu_fit"),
        ({"weights": {"gpu_fit": "0.5"}}, "weights.gpu_fit"),
        # a string refuses a number
        ({"command": ["echo", 7]}, "command.1"),
    ],
)
async def test_a_submit_field_of_another_type_is_bad_type(
    client: Any, patch: dict[str, Any], key: str
) -> None:
    await refused(await client.post("/v1/jobs", json={**SHELL, **patch}), key)


async def test_right_types_pass_and_a_number_takes_an_integer(client: Any) -> None:
    body = {
        **SHELL,
        "priority": 7,
        "seed": 42,
        "limits": {"timeout_sec": 60, "cpu_cores": 1, "no_internet": True},
        "weights": {"gpu_fit": 1, "spread": 0.5},  # an integer is a number
    }
    response = await client.post("/v1/jobs", json=body)
    assert response.status_code == 202, await response.get_json()
    job = await response.get_json()
    assert job["priority"] == 7 and job["seed"] == 42


async def test_policy_and_preflight_bodies_are_strict(client: Any) -> None:
    admin = {"Authorization": "Bearer admin-token-for-tests-0123456789"}
    for body, key in (
        ({"retention_days": False}, "retention_days"),
        ({"retention_days": "30"}, "retention_days"),
        ({"org": {"max_cpu": True}}, "org.max_cpu"),
    ):
        put = await client.put("/v1/policy?org=org_default", json=body, headers=admin)
        await refused(put, key)
    for body, key in (
        ({"limits": {"timeout_sec": False}}, "limits.timeout_sec"),
        ({"limits": {"cpu_cores": True}}, "limits.cpu_cores"),
        ({"limits": {"gpu_count": 0.5}}, "limits.gpu_count"),
    ):
        await refused(await client.post("/v1/policy/preflight", json=body), key)
    # a number field takes an integer and a fraction
    fine = await client.post("/v1/policy/preflight", json={"limits": {"cpu_cores": 2}})
    assert fine.status_code == 200, await fine.get_json()
    fine = await client.post("/v1/policy/preflight", json={"limits": {"ram_gb": 1.5}})
    assert fine.status_code == 200, await fine.get_json()
    kept = await client.put("/v1/policy?org=org_default", json={"retention_days": 0}, headers=admin)
    assert kept.status_code == 200, await kept.get_json()


async def test_other_bodies_are_strict(client: Any) -> None:
    job = await (await client.post("/v1/jobs", json=SHELL)).get_json()
    await refused(
        await client.post(f"/v1/jobs/{job['job_id']}/priority", json={"priority": True}),
        "priority",
    )
    session = {"pod": {"services": [{"name": "s", "stack": "shell"}]}, "idle_ttl_sec": "60"}
    await refused(await client.post("/v1/sessions", json=session), "idle_ttl_sec")
    schedule = {"name": "n", "every": "1h", "job": {**SHELL, "priority": 1.5}}
    await refused(await client.post("/v1/schedules", json=schedule), "job.priority")


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("/v1/jobs?limit=true", "limit"),
        ("/v1/jobs?limit=1.5", "limit"),
        ("/v1/jobs?limit=%2B5", "limit"),
        ("/v1/jobs?limit=1_0", "limit"),
        ("/v1/nodes?paginate=banana", "paginate"),
        ("/v1/policy/preflight?cpu_cores=true", "cpu_cores"),
        ("/v1/policy/preflight?ram_gb=nan", "ram_gb"),
        ("/v1/policy/preflight?timeout_sec=false", "timeout_sec"),
    ],
)
async def test_a_query_value_of_another_type_is_bad_type(client: Any, url: str, key: str) -> None:
    await refused(await client.get(url), key)


async def test_query_values_of_the_right_type_pass(client: Any) -> None:
    for url in (
        "/v1/jobs?limit=5",
        "/v1/nodes?paginate=1",
        "/v1/nodes?paginate=false",
        "/v1/policy/preflight?cpu_cores=2&ram_gb=1.5&timeout_sec=60",
    ):
        response = await client.get(url)
        assert response.status_code == 200, (url, await response.get_json())
    # out of range is still invalid_query, not bad_type
    response = await client.get("/v1/jobs?limit=-1")
    assert (await response.get_json())["code"] == "invalid_query"


def test_a_stored_spec_still_loads() -> None:
    """The models stay lax where they read the store: a row written before strictness
    (a float where an integer goes, as an older server wrote it) loads."""
    stored = '{"stack": "shell", "limits": {"timeout_sec": 60.0, "no_internet": true}}'
    spec = JobSpec.load(stored)
    assert spec.limits.timeout_sec == 60 and spec.limits.no_internet is True
