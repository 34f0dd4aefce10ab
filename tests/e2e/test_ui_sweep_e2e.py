"""The sweep page (/arrays/<id>, docs/ui.md) in Chromium against a real server and agent:
a sim-cartpole sweep's table has a column per swept config key (not the fixed one) and per
final metric, sorts numerically both ways with aria-sort, marks the best value by the
stack's higher_is_better (higher for sim-cartpole's rewards, lower for the python stack's
loss), charts a metric against a config key with one point per finished job, and draws
every job's curve on one chart with a legend; the array's jobs list links to it."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.e2e.conftest import LiveServer, StartAgent, online_nodes, wait_for
from tests.e2e.test_ui_browser_e2e import CHROMIUM, UNNAMED, chromium

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")

ENDED = ("succeeded", "failed", "cancelled", "timeout")
#: the python stack's loss (lower is better) by the swept entrypoint value
LOSS = (
    'case "$RUNPLANE_CONFIG_ENTRYPOINT" in a.py) l=0.3;; b.py) l=0.1;; *) l=0.7;; esac; '
    'echo "::metric {\\"step\\": 1, \\"loss\\": $l}"'
)

COLUMN = """(column) => [...document.querySelectorAll("#sweep-table tbody tr")]
  .map((tr) => tr.querySelector(`td[data-column='${column}']`).textContent)"""


def column(page: Any, key: str) -> list[str]:
    return page.evaluate(COLUMN, key)


def browse_sweep(base: str, array_id: str, loss_array: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(base + f"/?array={array_id}")
        page.wait_for_selector("#sweep-link")
        page.wait_for_selector("tr[data-job] .job-name")
        seen["names"] = page.eval_on_selector_all(
            "tr[data-job] .job-name", "(links) => links.map((a) => a.textContent)"
        )
        page.click("#sweep-link")
        page.wait_for_selector("#sweep-table td.best")
        seen["url"] = page.url
        seen["columns"] = page.eval_on_selector_all(
            "#sweep-table thead th", "(ths) => ths.map((th) => th.dataset.column)"
        )
        seen["rows"] = page.locator("#sweep-table tbody tr").count()
        seen["best_jobs"] = page.eval_on_selector_all(
            "#sweep-table td.best[data-column='metric:mean_reward']",
            "(tds) => tds.map((td) => td.closest('tr').dataset.job)",
        )
        header = "#sweep-table th[data-column='config:max_steps']"
        seen["before"] = page.get_attribute(header, "aria-sort")
        page.click(f"{header} button")
        seen["ascending"] = (
            page.get_attribute(header, "aria-sort"),
            column(page, "config:max_steps"),
        )
        page.click(f"{header} button")
        seen["descending"] = (
            page.get_attribute(header, "aria-sort"),
            column(page, "config:max_steps"),
        )
        # a metric against a config key: one dot per finished job
        page.select_option("#sweep-metric", "mean_reward")
        page.select_option("#sweep-config", "max_steps")
        chart = "#metric-by-config"
        page.wait_for_selector(f"{chart} figcaption >> text=mean_reward against max_steps")
        seen["scatter_dots"] = page.locator(f"{chart} circle.dot").count()
        seen["scatter_series"] = page.eval_on_selector_all(
            f"{chart} .legend li", "(lis) => lis.map((li) => li.textContent)"
        )
        seen["scatter_titles"] = page.eval_on_selector_all(
            f"{chart} .axis-title", "(ts) => ts.map((t) => t.textContent)"
        )
        # several runs on one chart: every job's reward per episode, a legend
        page.wait_for_selector("#curves .legend li")
        page.select_option("#curve-metric", "reward")
        page.wait_for_function("document.querySelectorAll('#curves .legend li').length === 6")
        seen["curve_series"] = page.locator("#curves g.series").count()
        seen["curve_caption"] = page.locator("#curves figcaption").inner_text()
        seen["unnamed"] = page.evaluate(UNNAMED)
        # lower is better: the python stack's loss, against a text config key
        page.goto(base + f"/arrays/{loss_array}")
        page.wait_for_selector("#sweep-table td.best")
        seen["loss_best"] = page.eval_on_selector_all(
            "#sweep-table td.best", "(tds) => tds.map((td) => td.textContent)"
        )
        page.wait_for_selector("#metric-by-config circle.dot")
        seen["loss_x_ticks"] = page.eval_on_selector_all(
            "#metric-by-config .x-tick", "(ts) => ts.map((t) => t.textContent)"
        )
    return seen


async def test_the_sweep_page_compares_an_arrays_jobs(
    server: LiveServer, start_agent: StartAgent
) -> None:
    start_agent(server.url, "sweepnode", "--max-concurrency", "4")
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        cartpole = await client.post(
            "/v1/jobs/batch",
            json={
                "job": {"stack": "sim-cartpole", "config": {"episodes": 3}},
                "sweep": {"max_steps": [20, 200, 60], "epsilon": [0.0, 0.5]},
            },
        )
        assert cartpole.status_code == 202, cartpole.text
        losses = await client.post(
            "/v1/jobs/batch",
            json={
                "job": {"stack": "python", "command": ["sh", "-c", LOSS]},
                "sweep": {"entrypoint": ["a.py", "b.py", "c.py"]},
            },
        )
        assert losses.status_code == 202, losses.text
        array_id, loss_id = cartpole.json()["array_id"], losses.json()["array_id"]

        async def ended(array: str, count: int) -> bool:
            phases = (await client.get(f"/v1/arrays/{array}")).json()["phases"]
            return sum(phases.get(p, 0) for p in ENDED) == count

        await wait_for(lambda: ended(array_id, 6), 120, "the cartpole sweep")
        await wait_for(lambda: ended(loss_id, 3), 120, "the loss sweep")
        jobs = (await client.get(f"/v1/jobs?array={array_id}")).json()
        seen = await trio.to_thread.run_sync(
            browse_sweep, server.url.rstrip("/"), array_id, loss_id
        )
    assert all(j["phase"] == "succeeded" for j in jobs), [j["error"] for j in jobs]
    assert seen["url"].endswith(f"/arrays/{array_id}")
    # the swept keys, not the fixed episodes; the final metrics
    assert seen["columns"] == [
        ":index",
        ":job_id",
        ":phase",
        "config:epsilon",
        "config:max_steps",
        "metric:mean_reward",
        "metric:reward",
    ]
    assert seen["rows"] == 6
    # jobs running the stack's own program are named by the stack and what they were
    # given (the stack's defaults left out), not by the first line of its script
    assert "sim-cartpole episodes=3 epsilon=0.5 max_steps=60" in seen["names"], seen["names"]
    top = max(j["final_metrics"]["mean_reward"] for j in jobs)
    best = {j["job_id"] for j in jobs if j["final_metrics"]["mean_reward"] == top}
    assert seen["best_jobs"] and set(seen["best_jobs"]) == best
    assert seen["before"] == "none"
    assert seen["ascending"] == ("ascending", ["20", "20", "60", "60", "200", "200"])
    assert seen["descending"] == ("descending", ["200", "200", "60", "60", "20", "20"])
    assert seen["scatter_dots"] == 6
    # the jobs of one epsilon joined across max_steps, a series each
    assert seen["scatter_series"] == ["epsilon=0", "epsilon=0.5"]
    assert seen["scatter_titles"] == ["max_steps", "mean_reward"]
    assert seen["curve_series"] == 6 and seen["curve_caption"].startswith("reward over steps")
    assert seen["unnamed"] == []
    assert seen["loss_best"] == ["0.1"]  # python's loss: lower is better
    assert seen["loss_x_ticks"] == ["a.py", "b.py", "c.py"]
