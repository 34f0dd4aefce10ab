"""``GET /metrics`` (docs/operations.md "Metrics"): scraped over the app and parsed with
prometheus-client's own parser; the figures follow what happened (a submit, a queue with
no node, store commits); labels are bounded; with RUNPLANE_AUTH=required only the admin
token or RUNPLANE_METRICS_TOKEN may scrape; OpenMetrics when the scraper asks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from quart_trio import QuartTrio

from runplane.http.app import create_app
from runplane.settings import Settings
from tests.auth.support import ADMIN_H, bearer, mint

METRICS_TOKEN = "metrics-scraper-token-0123456789"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def scrape(
    client: Any, **headers: str
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = await client.get("/metrics", headers=headers)
    assert response.status_code == 200, await response.get_data(as_text=True)
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return samples(await response.get_data(as_text=True))


async def test_the_figures_follow_a_submit_and_the_queue(client: Any) -> None:
    before = await scrape(client)
    assert before[("runplane_jobs", (("phase", "queued"),))] == 0
    response = await client.post("/v1/jobs", json={"stack": "shell", "command": ["true"]})
    assert response.status_code == 202
    bad = await client.post("/v1/jobs", json={"stack": "shell", "config": {"nope": 1}})
    assert bad.status_code in (400, 422)
    after = await scrape(client)
    assert after[("runplane_jobs", (("phase", "queued"),))] == 1
    assert after[("runplane_job_submits_total", (("outcome", "created"),))] == 1
    assert after[("runplane_job_submits_total", (("outcome", "invalid"),))] == 1
    assert after[("runplane_job_submit_seconds_count", ())] == 2
    assert after[("runplane_job_submit_seconds_bucket", (("le", "+Inf"),))] == 2
    assert after[("runplane_placement_queue_depth", ())] == 1  # no node to run it
    # fair share: one org waits, none runs (per org: GET /v1/analytics/share)
    assert after[("runplane_fair_share_orgs", (("state", "waiting"),))] == 1
    assert after[("runplane_fair_share_orgs", (("state", "running"),))] == 0
    assert after[("runplane_fair_share_spread", ())] == 0
    assert (
        after[("runplane_store_commit_seconds_count", ())]
        > before[("runplane_store_commit_seconds_count", ())]
    )
    assert after[("runplane_mailbox_depth", (("kind", "placement"),))] >= 0
    # a queued job is a row and a queue entry, not an actor, until placement assigns it
    assert after[("runplane_actors", (("kind", "job"),))] == 0
    await client.post(
        f"/v1/jobs/{(await response.get_json())['job_id']}/priority", json={"priority": 3}
    )
    again = await scrape(client)
    assert again[("runplane_actors", (("kind", "job"),))] == 1  # a control message woke it
    assert after[("runplane_fleet_capacity", (("resource", "cpu_cores"),))] == 0
    assert after[("runplane_webhook_deliveries", (("status", "pending"),))] == 0
    assert after[("runplane_sse_followers", ())] == 0
    # bounded labels: no job, node or org id anywhere
    job_id = (await response.get_json())["job_id"]
    text = await (await client.get("/metrics")).get_data(as_text=True)
    assert job_id not in text and "org_" not in text


async def test_openmetrics_when_the_scraper_asks(client: Any) -> None:
    response = await client.get(
        "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("application/openmetrics-text")
    assert (await response.get_data(as_text=True)).rstrip().endswith("# EOF")


async def test_required_auth_takes_the_admin_or_the_metrics_token(
    make_settings: Callable[..., Settings],
) -> None:
    app: QuartTrio = create_app(make_settings(auth="required", metrics_token=METRICS_TOKEN))
    async with app.test_app():
        client = app.test_client()
        refused = await client.get("/metrics")
        assert refused.status_code == 401
        assert "RUNPLANE_METRICS_TOKEN" in (await refused.get_json())["detail"]
        member = (await mint(client, subject="mo", role="member"))["token"]
        assert (await client.get("/metrics", headers=bearer(member))).status_code == 401
        wrong = await client.get("/metrics", headers=bearer("metrics-scraper-token-wrong-value"))
        assert wrong.status_code == 401
        await scrape(client, **ADMIN_H)
        await scrape(client, **bearer(METRICS_TOKEN))
