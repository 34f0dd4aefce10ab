"""The jobs list, the nodes page and the charts in Chromium (Playwright's sync API in a
worker thread) against a real server and agent (docs/ui.md): the empty states teach the
first job and the first node; a job reads as its command, node name, duration (live while
it runs), a relative time with the absolute one on hover and the wait reason of a queued
one; the node and project filters narrow the list and stay in the URL; on a 390 px phone
the phase stays on screen; a one-point metric chart shows a dot with its value; the node
load charts have axes with their titles. scripts/screenshots answers --help."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.e2e.conftest import (
    LiveServer,
    StartAgent,
    e2e_settings,
    online_nodes,
    start_server,
    submit,
    wait_for,
    wait_phase,
)
from tests.e2e.test_ui_browser_e2e import CHROMIUM, UNNAMED, chromium

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")

ROOT = Path(__file__).resolve().parents[2]
ONE_POINT = 'echo \'::metric {"step": 1, "loss": 0.5}\''

ROW_TEXT = """(id) => {
  const row = document.querySelector(`tr[data-job='${id}']`);
  const time = row.querySelector("td.created time");
  return { name: row.querySelector(".job-name").textContent, node: row.querySelector(".node-cell").textContent,
    duration: row.querySelector(".duration").textContent, created: time.textContent,
    created_title: time.getAttribute("title"), wait: row.querySelector(".wait").textContent,
    id_title: row.querySelector(".job-sub .id").getAttribute("title") };
}"""


def listed(page: Any) -> list[str]:
    return page.eval_on_selector_all("tr[data-job]", "(rows) => rows.map((r) => r.dataset.job)")


def browse_empty(base: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    with chromium() as browser:
        page = browser.new_page()
        page.goto(base + "/")
        page.wait_for_selector("#jobs-empty")
        seen["jobs_empty"] = page.locator("#jobs-empty").inner_text()
        page.goto(base + "/?project=nothing-here")
        page.wait_for_selector("#jobs-no-match")
        seen["no_match"] = page.locator("#jobs-no-match").inner_text()
        page.goto(base + "/nodes")
        page.wait_for_selector("#nodes-empty")
        seen["nodes_empty"] = page.locator("#nodes-empty").inner_text()
        seen["unnamed"] = page.evaluate(UNNAMED)
    return seen


def browse_jobs(base: str, jobs: dict[str, str], node: dict[str, Any]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    with chromium() as browser:
        page = browser.new_page()
        page.goto(base + "/")
        page.wait_for_selector(f"tr[data-job='{jobs['queued']}'] .wait >> text=no node meets")
        for key, job_id in jobs.items():
            seen[key] = page.evaluate(ROW_TEXT, job_id)
        # the running job's duration counts up with the refreshes
        page.wait_for_function(
            "([id, was]) => document.querySelector(`tr[data-job='${id}'] .duration`)"
            ".textContent !== was",
            arg=[jobs["running"], seen["running"]["duration"]],
        )
        seen["unnamed"] = page.evaluate(UNNAMED)
        # the node filter, by name: the queued job (no node) goes, the URL keeps it
        seen["node_options"] = page.eval_on_selector_all(
            "#node-filter option", "(os) => os.map((o) => o.textContent)"
        )
        page.select_option("#node-filter", label=node["name"])
        page.wait_for_function(f"!document.querySelector(\"tr[data-job='{jobs['queued']}']\")")
        seen["by_node"] = listed(page)
        seen["by_node_url"] = page.url
        page.goto(page.url)  # a linked filtered list opens filtered
        page.wait_for_selector(f"tr[data-job='{jobs['hello']}']")
        seen["linked_node"] = page.input_value("#node-filter")
        seen["linked_rows"] = listed(page)
        page.fill("#project-filter", "vision")
        page.press("#project-filter", "Enter")
        page.wait_for_function(f"!document.querySelector(\"tr[data-job='{jobs['running']}']\")")
        seen["by_project"] = listed(page)
        seen["by_project_url"] = page.url
        # a phone: the phase cell stays inside the viewport
        phone = browser.new_page(viewport={"width": 390, "height": 844})
        phone.goto(base + "/")
        phone.wait_for_selector(f"tr[data-job='{jobs['failing']}']")
        seen["phone_phase_right"] = phone.evaluate(
            "(id) => document.querySelector(`tr[data-job='${id}'] .phase-cell`)"
            ".getBoundingClientRect().right",
            jobs["failing"],
        )
        # a one-point metric: a dot with its value, axes with their titles
        page.goto(base + f"/jobs/{jobs['hello']}")
        page.wait_for_selector("#charts .chart[data-key='loss'] circle.dot")
        chart = "#charts .chart[data-key='loss']"
        seen["dots"] = page.locator(f"{chart} circle.dot").count()
        seen["dot_value"] = page.locator(f"{chart} .dot-value").text_content()
        seen["titles"] = page.eval_on_selector_all(
            f"{chart} .axis-title", "(ts) => ts.map((t) => t.textContent)"
        )
        page.hover(f"{chart} circle.dot")
        seen["readout"] = page.locator(f"{chart} .chart-readout").inner_text()
    return seen


@needs_chromium
async def test_the_jobs_list_reads_filters_and_teaches(
    server: LiveServer, start_agent: StartAgent
) -> None:
    base = server.url.rstrip("/")
    empty = await trio.to_thread.run_sync(browse_empty, base)
    assert "No jobs yet. Submit one:" in empty["jobs_empty"]
    assert "runplane submit shell -- echo hello" in empty["jobs_empty"]
    assert f"curl -X POST {base}/v1/jobs -H 'Authorization: Bearer $TOKEN'" in empty["jobs_empty"]
    assert '"command":["echo","hello"]' in empty["jobs_empty"]
    assert "No job matches the filters" in empty["no_match"]
    assert "runplane agent --server" in empty["nodes_empty"]
    assert empty["unnamed"] == []
    start_agent(server.url, "listnode", "--max-concurrency", "4")
    async with server.client() as client:
        node = (await wait_for(lambda: online_nodes(client), 30, "the agent"))[0]
        jobs = {
            "hello": await submit(
                client,
                {"stack": "shell", "command": ["sh", "-c", ONE_POINT], "project": "vision"},
            ),
            "failing": await submit(client, {"stack": "shell", "command": ["sh", "-c", "exit 3"]}),
            "queued": await submit(
                client, {"stack": "shell", "command": ["true"], "limits": {"gpu_count": 1}}
            ),
            "running": await submit(client, {"stack": "shell", "command": ["sleep", "60"]}),
        }
        await wait_phase(client, jobs["hello"], "succeeded")
        await wait_phase(client, jobs["failing"], "failed")
        await wait_phase(client, jobs["running"], "running")
        seen = await trio.to_thread.run_sync(browse_jobs, base, jobs, node)
        await client.post(f"/v1/jobs/{jobs['running']}/cancel")
    hello = seen["hello"]
    assert hello["name"].strip() == "sh -c 'echo '\\''::metric {\"step\": 1, \"loss\": 0.5}'\\'''"
    assert hello["node"] == "listnode"
    assert hello["duration"].endswith(("ms", "s"))
    assert hello["created"].endswith("ago") and hello["created_title"]
    assert hello["id_title"] == jobs["hello"] and hello["wait"] == ""
    assert seen["failing"]["name"] == "sh -c 'exit 3'"
    assert seen["queued"]["name"] == "true" and seen["queued"]["node"] == ""
    assert seen["queued"]["wait"].startswith("no node meets")
    assert seen["running"]["name"] == "sleep 60" and seen["running"]["duration"]
    assert seen["unnamed"] == []
    assert seen["node_options"] == ["any node", "listnode"]
    assert set(seen["by_node"]) == {jobs["hello"], jobs["failing"], jobs["running"]}
    assert f"node={node['id']}" in seen["by_node_url"]
    assert seen["linked_node"] == node["id"] and set(seen["linked_rows"]) == set(seen["by_node"])
    assert seen["by_project"] == [jobs["hello"]]
    assert "project=vision" in seen["by_project_url"] and "node=" in seen["by_project_url"]
    assert 0 < seen["phone_phase_right"] <= 390
    assert (seen["dots"], seen["dot_value"]) == (1, "0.5")
    assert seen["titles"] == ["step", "loss"]
    assert seen["readout"] == "x 1, y 0.5"


def browse_nodes(base: str, node_id: str) -> dict[str, Any]:
    with chromium() as browser:
        page = browser.new_page()
        page.goto(base + "/nodes")
        chart = f"#load-{node_id}"
        page.wait_for_selector(f"{chart} .series circle.dot")
        return {
            "name": page.locator(f"tr[data-node='{node_id}'] td").first.inner_text(),
            "caption": page.locator(f"{chart} figcaption").inner_text(),
            "titles": page.eval_on_selector_all(
                f"{chart} .axis-title", "(ts) => ts.map((t) => t.textContent)"
            ),
            "y_ticks": page.locator(f"{chart} .y-tick").count(),
            "x_ticks": page.locator(f"{chart} .x-tick").count(),
            "width": page.evaluate(
                "(id) => [document.querySelector(`#load-${id} svg`).getBoundingClientRect()"
                ".width, document.querySelector('#node-charts').getBoundingClientRect().width]",
                node_id,
            ),
        }


@needs_chromium
async def test_the_nodes_page_charts_the_load_with_axes(
    nursery: trio.Nursery, tmp_path: Path, start_agent: StartAgent
) -> None:
    server = await start_server(
        nursery, e2e_settings(tmp_path / "server"), heartbeat_sec=0.5, node_sample_sec=0.2
    )
    start_agent(server.url, "chartnode")
    async with server.client() as client:
        node = (await wait_for(lambda: online_nodes(client), 30, "the agent"))[0]

        async def sampled() -> bool:
            body = (await client.get(f"/v1/nodes/{node['id']}/metrics?window=15m")).json()
            return len(body["samples"]) >= 2

        await wait_for(sampled, 30, "two load samples")
        seen = await trio.to_thread.run_sync(browse_nodes, server.url.rstrip("/"), node["id"])
    server.stop.set()
    assert seen["name"] == "chartnode"
    assert seen["caption"].startswith("chartnode: committed load")
    assert seen["titles"] == ["time", "load (%)"]
    assert seen["y_ticks"] >= 3 and seen["x_ticks"] >= 1
    svg_width, box_width = seen["width"]
    assert svg_width > box_width * 0.9  # the chart fills its box's width


async def test_the_array_page_is_one_more_shell(server: LiveServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        page = await client.get("/arrays/arr_x")
        assert page.status_code == 200 and '<main id="view"' in page.text
        for asset in ("/static/sweep.js", "/static/chart.js", "/static/jobs.js"):
            assert (await client.get(asset)).status_code == 200, asset


def test_the_screenshots_script_answers_help() -> None:
    script = ROOT / "scripts" / "screenshots"
    assert os.access(script, os.X_OK)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert b"docs/img" in done.stdout and b"--out" in done.stdout
