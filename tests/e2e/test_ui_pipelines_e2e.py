"""The pipeline page draws the DAG (issue 40, "What to build"), and the empty pipelines
and sessions pages teach (item 7), in Chromium against a real server and agent: a -> b,
a -> c, (b, c) -> d is four boxes in three layers with four edges, titled by the run's
name, each box linking to its job, its colour following the stage's phase live until the
run ended (c's exit code in its box); a phone's width fits. The empty pages' CLI and curl
lines, run as shown, make the first pipeline and session; a stopped session offers no
"Keep alive" and no "Stop"."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import trio

from tests.e2e.conftest import LiveServer, StartAgent, online_nodes, wait_for
from tests.e2e.test_ui_browser_e2e import UNNAMED, chromium, pytestmark  # noqa: F401
from tests.e2e.test_ui_run_e2e import FITS, PHONE, gate_fixture  # noqa: F401

#: The stage boxes' border colours by phase (app.css), as Chromium computes them.
COLOURS = {"succeeded": "rgb(134, 239, 172)", "failed": "rgb(252, 165, 165)"}

BOXES = """() => [...document.querySelectorAll("#dag .dag-level")].map((level) =>
  [...level.querySelectorAll("[data-stage]")].map((box) => ({
    name: box.dataset.stage, phase: box.dataset.phase,
    badge: box.querySelector(".phase").textContent,
    href: box.querySelector("a") ? box.querySelector("a").getAttribute("href") : null,
    colour: getComputedStyle(box).borderTopColor,
    text: box.innerText,
    left: box.getBoundingClientRect().left, right: box.getBoundingClientRect().right,
  })))"""

EDGES = """() => [...document.querySelectorAll("#dag svg path[data-edge]")]
  .map((p) => p.dataset.edge).sort()"""


def watch_dag(base: str, run_id: str, gate: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    with chromium() as browser:
        page = browser.new_page()
        page.goto(base + f"/pipelines/{run_id}")
        page.wait_for_selector("[data-stage='a'][data-phase='running']", timeout=60_000)
        seen["live"] = page.evaluate(BOXES)
        seen["title"] = page.title()
        seen["h1"] = page.locator("h1").inner_text()
        seen["run_id"] = page.locator("h1 .run-id").inner_text()
        seen["unnamed"] = page.evaluate(UNNAMED)
        gate.touch()  # a ends; the rest run; the page follows without a reload
        page.wait_for_selector("h1 .phase-succeeded, h1 .phase-failed", timeout=60_000)
        page.wait_for_selector("[data-stage='c'] .stage-exit", timeout=30_000)
        seen["final"] = page.evaluate(BOXES)
        seen["edges"] = page.evaluate(EDGES)
        phone = browser.new_page(viewport=PHONE)
        phone.goto(base + f"/pipelines/{run_id}")
        phone.wait_for_selector("#dag svg path[data-edge]")
        seen["phone_fits"] = phone.evaluate(FITS)
    return seen


def stage(name: str, script: str, *needs: str, **more: Any) -> dict[str, Any]:
    return {
        "name": name,
        "stack": "shell",
        "command": ["sh", "-c", script],
        "needs": list(needs),
        **more,
    }


async def test_the_pipeline_page_draws_the_dag_live(
    server: LiveServer, start_agent: StartAgent, gate: Path
) -> None:
    start_agent(server.url, "dagnode", "--max-concurrency", "2")
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        created = await client.post(
            "/v1/pipelines",
            json={
                "name": "diamond",
                "stages": [
                    stage(
                        "a", 'while [ ! -e "$GATE" ]; do sleep 0.2; done', env={"GATE": str(gate)}
                    ),
                    stage("b", "echo b", "a"),
                    stage("c", "exit 3", "a", allow_failure=True),
                    stage("d", "echo d", "b", "c"),
                ],
            },
        )
        assert created.status_code == 202, created.text
        run_id = created.json()["pipeline_run_id"]
        seen = await trio.to_thread.run_sync(watch_dag, server.url.rstrip("/"), run_id, gate)
        final = (await client.get(f"/v1/pipelines/{run_id}")).json()
    stages = {s["name"]: s for s in final["stages"]}
    # four boxes in three layers, four edges, the run's name as the title
    assert [[box["name"] for box in level] for level in seen["final"]] == [["a"], ["b", "c"], ["d"]]
    assert seen["edges"] == ["a->b", "a->c", "b->d", "c->d"]
    assert seen["title"] == "diamond · runplane"
    assert seen["h1"].startswith("diamond") and seen["run_id"] == run_id
    (a,), (b, c), (d,) = seen["final"]
    assert a["right"] < b["left"] and b["right"] < d["left"]  # left to right by depth
    # live: a ran while the others waited
    live = {box["name"]: box["phase"] for level in seen["live"] for box in level}
    assert live == {"a": "running", "b": "pending", "c": "pending", "d": "pending"}
    # final: each box links to its job, its phase and colour those of the API's stage
    for box in (a, b, c, d):
        api = stages[box["name"]]
        assert box["href"] == f"/jobs/{api['job_id']}"
        assert box["phase"] == box["badge"] == api["phase"]
        assert box["colour"] == COLOURS[api["phase"]], box
    assert (a["phase"], c["phase"], d["phase"]) == ("succeeded", "failed", "succeeded")
    assert "exit code 3" in c["text"] and "exit code 0" in d["text"]
    assert seen["phone_fits"] and seen["unnamed"] == []


def empty_pages(base: str, make: Any) -> dict[str, Any]:
    """The empty pages' lines; ``make(kind, lines)`` runs them (from the test's loop)."""
    seen: dict[str, Any] = {}
    with chromium() as browser:
        page = browser.new_page()
        for kind in ("pipelines", "sessions"):
            page.goto(f"{base}/{kind}")
            page.wait_for_selector(f"#{kind}-howto")
            seen[f"{kind}_text"] = page.locator("#view").inner_text()
            lines = {
                how: page.locator(f"#{kind}-howto pre[data-howto='{how}']").inner_text()
                for how in ("cli", "curl")
            }
            seen[f"{kind}_lines"] = lines
            seen[f"{kind}_made"] = make(kind, lines)
            page.wait_for_selector(f"tr[data-{kind[:-1]}] >> nth=1", timeout=30_000)
            seen[f"{kind}_rows"] = page.locator(f"tr[data-{kind[:-1]}]").count()
        seen["unnamed"] = page.evaluate(UNNAMED)
    return seen


async def test_the_empty_pages_teach_and_their_lines_run(
    server: LiveServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    start_agent(server.url, "emptynode", "--max-concurrency", "4")
    token = trio.lowlevel.current_trio_token()

    async def run_lines(kind: str, lines: dict[str, str]) -> list[str]:
        out = []
        # `runplane` is this tree's CLI (python -m runplane)
        shim = f'runplane() {{ "{sys.executable}" -m runplane "$@"; }}\n'
        for how in ("cli", "curl"):
            done = await trio.run_process(
                ["bash", "-c", shim + lines[how]], cwd=tmp_path, capture_stdout=True, check=False
            )
            assert done.returncode == 0, (kind, how, done)
            out.append(done.stdout.decode())
        return out

    def make(kind: str, lines: dict[str, str]) -> list[str]:
        return trio.from_thread.run(run_lines, kind, lines, trio_token=token)

    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        seen = await trio.to_thread.run_sync(empty_pages, server.url.rstrip("/"), make)
        pipelines = (await client.get("/v1/pipelines")).json()
        sessions = (await client.get("/v1/sessions")).json()
        stopped = sessions[0]["id"]
        assert (await client.delete(f"/v1/sessions/{stopped}")).status_code == 200
        buttons = await trio.to_thread.run_sync(session_buttons, server.url.rstrip("/"), stopped)
        for live in sessions[1:]:
            await client.delete(f"/v1/sessions/{live['id']}")
    assert (
        "No pipelines yet" in seen["pipelines_text"] and "No sessions yet" in seen["sessions_text"]
    )
    assert seen["pipelines_lines"]["cli"].splitlines()[-1].startswith("runplane --url ")
    assert seen["pipelines_lines"]["curl"].startswith("curl -X POST ")
    assert [p["name"] for p in pipelines] == ["hello", "hello"]
    assert [p["stage_count"] for p in pipelines] == [2, 2]
    assert len(sessions) == 2 and all(s["name"] == "hello" for s in sessions)
    assert seen["pipelines_rows"] == seen["sessions_rows"] == 2
    assert buttons["stopped"] == [] and buttons["live"] == ["Keep alive", "Stop"]
    assert seen["unnamed"] == []


def session_buttons(base: str, stopped: str) -> dict[str, Any]:
    with chromium() as browser:
        page = browser.new_page()
        page.goto(base + "/sessions")
        page.wait_for_selector(f"tr[data-session='{stopped}'] .phase-stopped", timeout=30_000)
        live = page.locator(f"tr[data-session]:not([data-session='{stopped}']) button")
        return {
            "stopped": page.locator(f"tr[data-session='{stopped}'] button").all_inner_texts(),
            "live": live.all_inner_texts(),
        }
