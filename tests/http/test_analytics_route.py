"""GET /v1/analytics/jobs over the app: what jobs just did shows in the current bucket and
the live summary; bad windows and bucket counts are 400."""

from __future__ import annotations

from typing import Any

from tests.auth.support import ok_json


async def test_jobs_just_submitted_and_ended_are_counted(client: Any) -> None:
    before = await ok_json(await client.get("/v1/analytics/jobs"), 200)
    assert before["window"] == "24h" and len(before["buckets"]) == 48
    ids = []
    for _ in range(3):
        job = await ok_json(await client.post("/v1/jobs", json={"stack": "shell"}), 202)
        ids.append(job["job_id"])
    await ok_json(await client.post(f"/v1/jobs/{ids[0]}/cancel"), 200)
    after = await ok_json(await client.get("/v1/analytics/jobs?window=1h&buckets=60"), 200)
    assert after["window"] == "1h" and len(after["buckets"]) == 60
    summary = after["summary"]
    assert (summary["submitted"], summary["cancelled"], summary["queued"]) == (3, 1, 2)
    assert summary["succeeded"] == summary["failed"] == summary["running"] == 0
    last = after["buckets"][-1]
    assert last["submitted"] + after["buckets"][-2]["submitted"] == 3  # within a minute
    stamps = [b["ts"] for b in after["buckets"]]
    assert stamps == sorted(set(stamps)) and stamps[1] - stamps[0] == 60_000


async def test_bad_parameters_are_400(client: Any) -> None:
    for query in ("window=31d", "window=soon", "buckets=0", "buckets=501", "buckets=x", "bucket=4"):
        response = await client.get(f"/v1/analytics/jobs?{query}")
        assert response.status_code == 400, query
