"""Policy routes: GET|PUT /v1/policy, preview, preflight, and GET /v1/me/entitlements."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runplane.http.app import create_app
from runplane.settings import Settings
from tests.auth.support import ADMIN_H, mint, ok_json

SHELL = {"stack": "shell", "command": ["true"]}


async def put_policy(client: Any, doc: dict[str, Any], org: str | None = None) -> Any:
    path = "/v1/policy" + (f"?org={org}" if org else "")
    return await client.put(path, json=doc, headers=ADMIN_H)


async def test_get_policy_without_a_doc_is_the_platform_layer(client: Any) -> None:
    view = await ok_json(await client.get("/v1/policy", headers=ADMIN_H), 200)
    assert view["org_id"] == "org_default"
    assert view["platform"] == {
        "max_cpu": 128,
        "max_ram": 1024,
        "max_gpu": 16,
        "max_timeout_sec": 604800,
        "max_concurrent_org": 100,
        "max_concurrent_user": 0,
        "max_preempt_grace_sec": 300,
        "preemptible_default": False,
    }
    assert view["policy"] == {
        "org_id": "org_default",
        "org": {},
        "projects": {},
        "users": {},
        "retention_days": None,
        "fair_share_weight": None,
        "updated_at": None,
    }
    assert set(view["effective"]["provenance"].values()) == {"platform"}
    assert view["effective_caps"]["max_cpu"] == 128


async def test_put_policy_sets_layers_with_provenance_per_axis(client: Any) -> None:
    doc = {
        "org": {"max_cpu": 32, "max_concurrent_org": 7},
        "projects": {"vision": {"max_ram": 64}},
        "users": {"alice": {"max_gpu": 2}},
    }
    put = await ok_json(await put_policy(client, doc), 200)
    assert put["policy"]["org"] == {"max_cpu": 32, "max_concurrent_org": 7}
    assert put["policy"]["updated_at"].endswith("Z")
    assert put["effective"]["provenance"]["max_cpu"] == "org"
    view = await ok_json(await client.get("/v1/policy", headers=ADMIN_H), 200)
    assert view["policy"]["projects"] == {"vision": {"max_ram": 64}}
    assert view["effective"]["max_cpu"] == 32
    assert view["effective"]["provenance"]["max_ram"] == "platform"  # no project named here

    preview = await ok_json(
        await client.get("/v1/policy/preview?project=vision&user=alice", headers=ADMIN_H), 200
    )
    assert preview["subject"] == "alice" and preview["project"] == "vision"
    provenance = preview["effective"]["provenance"]
    assert provenance == {
        "max_cpu": "org",
        "max_ram": "project",
        "max_gpu": "user",
        "max_timeout_sec": "platform",
        "max_concurrent_org": "org",
        "max_concurrent_user": "platform",
        "max_preempt_grace_sec": "platform",
        "preemptible_default": "platform",
    }
    assert preview["effective_caps"]["max_gpu"] == 2
    assert "effective_manifest" not in preview and "stack" not in preview


async def test_put_empty_doc_removes_every_refinement(client: Any) -> None:
    await ok_json(await put_policy(client, {"org": {"max_cpu": 4}}), 200)
    await ok_json(await put_policy(client, {}), 200)
    view = await ok_json(await client.get("/v1/policy", headers=ADMIN_H), 200)
    assert view["policy"]["org"] == {} and view["policy"]["updated_at"] is None
    assert view["effective"]["max_cpu"] == 128


async def test_put_policy_past_the_platform_ceiling_is_noted_and_capped(client: Any) -> None:
    put = await ok_json(await put_policy(client, {"org": {"max_cpu": 500}}), 200)
    assert put["notes"] == [
        "max_cpu 500 in the org layer is past the platform ceiling 128; 128 applies"
    ]
    view = await ok_json(await client.get("/v1/policy", headers=ADMIN_H), 200)
    assert view["effective"]["max_cpu"] == 500
    assert view["effective_caps"]["max_cpu"] == 128
    assert view["effective_caps"]["provenance"]["max_cpu"] == "platform"


async def test_put_policy_rejects_bad_documents_naming_the_field(client: Any) -> None:
    for doc, key in [
        ({"org": {"max_cpu": -1}}, "org.max_cpu"),
        ({"org": {"max_cpus": 1}}, "org.max_cpus"),
        ({"projects": {"p": {"max_gpu": "two"}}}, "projects.p.max_gpu"),
        ({"platform": {"max_cpu": 1}}, "platform"),
        ({"org_id": "org_other"}, "org_id"),
    ]:
        response = await put_policy(client, doc)
        body = await response.get_json()
        assert response.status_code == 400, (doc, body)
        assert body["errors"][0]["key"] == key, body


async def test_policy_routes_answer_503_when_policy_is_disabled(
    make_settings: Callable[..., Settings],
) -> None:
    app = create_app(make_settings(disable="policy"))
    async with app.test_app():
        client = app.test_client()
        for method, path in [
            ("GET", "/v1/policy"),
            ("PUT", "/v1/policy"),
            ("GET", "/v1/policy/preview"),
            ("POST", "/v1/policy/preview"),
        ]:
            response = await client.open(path, method=method, headers=ADMIN_H, json={})
            assert response.status_code == 503, (method, path)
            assert (await response.get_json())["code"] == "feature_disabled"
        # admission still applies the platform layer
        pre = await ok_json(await client.get("/v1/policy/preflight?cpu_cores=500"), 200)
        assert pre["clamp_notes"] == ["cpu 500->128"]


async def test_manager_is_confined_to_its_own_org(client: Any) -> None:
    owner = await mint(client, subject="olga", org_id="org_a", role="owner")
    headers = {"Authorization": f"Bearer {owner['token']}"}
    await ok_json(
        await client.put("/v1/policy", json={"org": {"max_gpu": 1}}, headers=headers), 200
    )
    mine = await ok_json(await client.get("/v1/policy", headers=headers), 200)
    assert mine["org_id"] == "org_a" and mine["policy"]["org"] == {"max_gpu": 1}
    other = await client.get("/v1/policy?org=org_default", headers=headers)
    unknown = await client.get("/v1/policy?org=org_nope", headers=headers)
    assert other.status_code == unknown.status_code == 404
    assert await other.get_data() != b"" and (await other.get_json())["code"] == "not_found"
    # the admin token reads org_a's document by name
    seen = await ok_json(await client.get("/v1/policy?org=org_a", headers=ADMIN_H), 200)
    assert seen["policy"]["org"] == {"max_gpu": 1}
    # and a member is no manager
    member = await mint(client, subject="mo", org_id="org_a", role="member")
    response = await client.get(
        "/v1/policy", headers={"Authorization": f"Bearer {member['token']}"}
    )
    assert response.status_code == 403


async def test_preview_with_a_stack_intersects_its_manifest_with_the_caps(client: Any) -> None:
    await ok_json(await put_policy(client, {"org": {"max_cpu": 8, "max_gpu": 0}}), 200)
    post = await ok_json(
        await client.post("/v1/policy/preview", json={"stack": "sim-cartpole"}, headers=ADMIN_H),
        200,
    )
    manifest = post["effective_manifest"]
    assert post["stack"] == "sim-cartpole"
    assert [f["key"] for f in manifest["config"]][:2] == ["episodes", "max_steps"]
    assert manifest["resources"]["cpu_cores"]["max"] == 8
    assert manifest["resources"]["gpu_count"]["max"] == 0
    assert manifest["launchable"] is True
    unknown = await ok_json(await client.get("/v1/policy/preview?stack=nope", headers=ADMIN_H), 200)
    assert "unknown stack 'nope'" in unknown["stack_error"]
    assert "effective_manifest" not in unknown


async def test_preflight_clamps_with_one_note_per_reduced_dimension(client: Any) -> None:
    await ok_json(await put_policy(client, {"org": {"max_cpu": 16, "max_ram": 64}}), 200)
    pre = await ok_json(
        await client.get(
            "/v1/policy/preflight?stack=shell&cpu_cores=200&ram_gb=32&gpu_count=40&timeout_sec=9"
        ),
        200,
    )
    assert pre["allowed"] is True and pre["http_status"] == 0 and pre["reason"] == ""
    assert pre["clamp_notes"] == ["cpu 200->16", "gpu 40->16"]
    assert pre["clamped"] == {"cpu_cores": 16, "ram_gb": 32, "gpu_count": 16, "timeout_sec": 9}
    assert pre["org"] == "org_default" and pre["stack"] == "shell" and pre["stack_error"] == ""
    post = await ok_json(
        await client.post(
            "/v1/policy/preflight",
            json={"stack": "shell", "limits": {"cpu_cores": 2.5, "isolation": "gvisor"}},
        ),
        200,
    )
    assert post["clamp_notes"] == [] and post["clamped"]["cpu_cores"] == 2.5
    assert post["clamped"]["timeout_sec"] == 604800  # no timeout asked: the ceiling applies


async def test_preflight_reports_stack_errors_and_bad_input(client: Any) -> None:
    unknown = await ok_json(await client.get("/v1/policy/preflight?stack=nope"), 200)
    assert unknown["allowed"] is False and unknown["http_status"] == 400
    assert "unknown stack 'nope'" in unknown["stack_error"]
    assert unknown["clamp_notes"] == []
    for query, key in [
        ("cpu_cores=lots", "cpu_cores"),
        ("cpu_cores=-1", "cpu_cores"),
        ("gpu_count=1.5", "gpu_count"),
        ("isolation=docker", "isolation"),
    ]:
        response = await client.get(f"/v1/policy/preflight?{query}")
        body = await response.get_json()
        assert response.status_code == 400, (query, body)
        assert body["errors"][0]["key"] == key
    response = await client.post("/v1/policy/preflight", json={"limits": {"cpus": 1}})
    assert response.status_code == 400
    assert (await response.get_json())["errors"][0]["key"] == "limits.cpus"


async def test_quota_429_and_preflight_agree(client: Any) -> None:
    await ok_json(await put_policy(client, {"org": {"max_concurrent_org": 2}}), 200)
    for _ in range(2):
        await ok_json(await client.post("/v1/jobs", json=SHELL), 202)
    pre = await ok_json(await client.get("/v1/policy/preflight?stack=shell"), 200)
    assert pre["allowed"] is False and pre["http_status"] == 429
    assert pre["concurrency"] == {
        "org_inflight": 2,
        "org_limit": 2,
        "user_inflight": 2,
        "user_limit": 0,
    }
    assert "max_concurrent_org, org layer" in pre["reason"]
    refused = await client.post("/v1/jobs", json=SHELL)
    body = await refused.get_json()
    assert refused.status_code == 429 and body["code"] == "quota_exceeded"
    assert body["detail"] == pre["reason"]
    # a cancelled job frees its slot at once
    first = (await ok_json(await client.get("/v1/jobs"), 200))[0]
    await ok_json(await client.post(f"/v1/jobs/{first['job_id']}/cancel"), 200)
    await ok_json(await client.post("/v1/jobs", json=SHELL), 202)


async def test_the_policy_fixes_a_jobs_preemption_at_submit(client: Any) -> None:
    """docs/placement.md "Preemption": unset, a job is the policy's ``preemptible_default``
    (off on the platform); its grace is its own or RUNPLANE_PREEMPT_GRACE_SEC, within
    ``max_preempt_grace_sec``; one that is not preemptible keeps no preemption keys."""

    async def spec_of(body: dict[str, Any]) -> dict[str, Any]:
        job = await ok_json(await client.post("/v1/jobs", json={**SHELL, **body}), 202)
        await client.post(f"/v1/jobs/{job['job_id']}/cancel")
        return dict(job["spec"])

    off = await spec_of({})
    assert (off["preemptible"], off["preempt_grace_sec"]) == (False, None)
    asked = await spec_of({"preemptible": True})
    assert (asked["preemptible"], asked["preempt_grace_sec"]) == (True, 30)
    doc = {"org": {"preemptible_default": True, "max_preempt_grace_sec": 20}}
    await ok_json(await put_policy(client, doc), 200)
    opted = await spec_of({"preempt_grace_sec": 90})
    assert (opted["preemptible"], opted["preempt_grace_sec"]) == (True, 20)  # the cap
    refused = await spec_of({"preemptible": False})
    assert refused["preemptible"] is False


async def test_per_user_quota_counts_each_user_alone(client: Any) -> None:
    await ok_json(await put_policy(client, {"org": {"max_concurrent_user": 1}}), 200)
    alice = await mint(client, subject="alice", org_id="org_default", role="member")
    bob = await mint(client, subject="bob", org_id="org_default", role="member")
    as_alice = {"Authorization": f"Bearer {alice['token']}"}
    as_bob = {"Authorization": f"Bearer {bob['token']}"}
    await ok_json(await client.post("/v1/jobs", json=SHELL, headers=as_alice), 202)
    second = await client.post("/v1/jobs", json=SHELL, headers=as_alice)
    assert second.status_code == 429
    assert "user alice has 1 live runs" in (await second.get_json())["detail"]
    await ok_json(await client.post("/v1/jobs", json=SHELL, headers=as_bob), 202)
    ent = await ok_json(await client.get("/v1/me/entitlements", headers=as_bob), 200)
    assert ent["usage"] == {"running": 0, "queued": 2, "user_inflight": 1}
    assert ent["limits"] == {"max_concurrent_org": 100, "max_concurrent_user": 1}
    assert ent["remaining"] == {"org_concurrent": 98, "user_concurrent": 0}
    assert ent["principal"]["subject"] == "bob" and ent["org"] == "org_default"


async def test_entitlements_omit_the_user_remaining_without_a_per_user_cap(client: Any) -> None:
    await ok_json(await client.post("/v1/jobs", json=SHELL), 202)
    ent = await ok_json(await client.get("/v1/me/entitlements"), 200)
    assert ent["limits"] == {"max_concurrent_org": 100, "max_concurrent_user": 0}
    assert ent["remaining"] == {"org_concurrent": 99}
    assert ent["usage"]["queued"] == 1 and ent["usage"]["user_inflight"] == 1
    assert ent["principal"]["kind"] == "anon"


async def test_submit_clamps_and_says_so_in_the_reply_and_the_log(client: Any) -> None:
    await ok_json(await put_policy(client, {"projects": {"small": {"max_cpu": 2}}}), 200)
    body = {**SHELL, "project": "small", "limits": {"cpu_cores": 200, "ram_gb": 4096}}
    job = await ok_json(await client.post("/v1/jobs", json=body), 202)
    assert job["clamp_notes"] == ["cpu 200->2", "ram 4096->1024"]
    assert job["spec"]["resources"]["cpu_cores"] == 2
    assert job["spec"]["resources"]["ram_gb"] == 1024
    logs = await ok_json(await client.get(f"/v1/jobs/{job['job_id']}/logs"), 200)
    assert logs["logs"] == [
        {"stream": "system", "line": "admission: cpu 200->2"},
        {"stream": "system", "line": "admission: ram 4096->1024"},
    ]
    # the same body outside the project is not clamped on cpu
    other = await ok_json(await client.post("/v1/jobs", json={**body, "project": ""}), 202)
    assert other["clamp_notes"] == ["cpu 200->128", "ram 4096->1024"]
    assert other["spec_hash"] != job["spec_hash"]
