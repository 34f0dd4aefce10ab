"""The web UI in a real browser (Debian's Chromium driven by Playwright's sync API, in a
worker thread: the server runs in this test's trio loop) against a real server with a
real agent: the jobs list links to the run view, which follows the logs live with their
ANSI colours and charts the metrics; a share link opens the read-only view; an embed
link shows the branding and only the allowed categories; a narrow (phone) viewport still
shows the page (docs/ui.md)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import trio

from tests.e2e.conftest import LiveServer, StartAgent, online_nodes, submit, wait_for, wait_phase

if TYPE_CHECKING:
    from playwright.sync_api import Browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")

SCRIPT = (
    'printf "\\033[32mgreen light\\033[0m plain\\n"; '
    'echo \'{"step": 1, "loss": 0.9}\' > /dev/null; echo done'
)


@contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's Chromium under Playwright's sync API (run it in a worker thread)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


#: Form controls and buttons without an accessible name (a label, aria-label or text).
UNNAMED = """() => [...document.querySelectorAll("input, select, textarea, button")]
  .filter((c) => !c.closest("[hidden]") && c.type !== "hidden")
  .filter((c) => !(c.labels && c.labels.length) && !c.getAttribute("aria-label")
    && !(c.tagName === "BUTTON" && c.textContent.trim()))
  .map((c) => c.outerHTML)"""


def browse(base: str, job_id: str, share_url: str, embed_url: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    with chromium() as browser:
        page = browser.new_page()
        page.goto(base + "/")
        page.wait_for_selector(f"tr[data-job='{job_id}']")
        page.click(f"a[href='/jobs/{job_id}']")
        page.wait_for_selector("#logs >> text=green light")
        seen["green"] = page.locator("#logs .ansi-32").first.inner_text()
        seen["phase"] = page.locator("#phase").inner_text()
        seen["share_button"] = page.locator("#share").count()
        # the share link: a read-only view, no share button
        shared = browser.new_page()
        shared.goto(share_url)
        shared.wait_for_selector("#logs >> text=done")
        seen["shared_url"] = shared.url
        seen["shared_note"] = shared.locator("#shared-note").count()
        seen["shared_button"] = shared.locator("#share").count()
        seen["token_box_hidden"] = shared.locator("#token-box").is_hidden()
        # the embed link: branding, logs only
        embedded = browser.new_page()
        embedded.goto(embed_url)  # absolute, like the share link
        embedded.wait_for_selector("#embed-title")
        seen["embed_title"] = embedded.locator("#embed-title").inner_text()
        embedded.wait_for_selector("#logs >> text=done")
        seen["embed_artifacts"] = embedded.locator("#artifacts").count()
        seen["embed_charts"] = embedded.locator("#charts").count()
        # an expired share link lands on the jobs list with the problem's message
        gone = browser.new_page()
        gone.goto(base + "/s/rpsh_nope")
        gone.wait_for_selector("#error:not([hidden])")
        seen["expired_error"] = gone.locator("#error").inner_text()
        # a phone's width: the page still renders its table
        phone = browser.new_page(viewport={"width": 375, "height": 700})
        phone.goto(base + "/")
        phone.wait_for_selector(f"tr[data-job='{job_id}']")
        seen["phone_overflow"] = phone.evaluate(
            "document.documentElement.scrollWidth <= window.innerWidth + 1"
        )
        # the keyboard keeps its place across the list's live refresh
        link = page.locator(f"a[href='/jobs/{job_id}']")
        page.goto(base + "/")
        link.focus()
        handle = link.element_handle()
        page.wait_for_function("(el) => !el.isConnected", arg=handle)  # the rows were redrawn
        seen["focus_kept"] = page.evaluate("document.activeElement.getAttribute('href')")
        seen["unnamed"] = page.evaluate(UNNAMED) + shared.evaluate(UNNAMED)
    return seen


async def test_the_ui_shows_a_run_live_shared_and_embedded(
    server: LiveServer, start_agent: StartAgent
) -> None:
    start_agent(server.url, "uinode")
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        job_id = await submit(client, {"stack": "shell", "command": ["sh", "-c", SCRIPT]})
        done = await wait_phase(client, job_id, "succeeded", "failed")
        assert done["phase"] == "succeeded"
        share = (await client.post(f"/v1/jobs/{job_id}/share")).json()
        embed = await client.post(
            f"/v1/jobs/{job_id}/embed",
            json={"allow": ["logs"], "branding": {"title": "Robot lab", "accent": "#ff6600"}},
        )
        assert embed.status_code == 201, embed.text
        base = server.url.rstrip("/")
        seen = await trio.to_thread.run_sync(
            browse, base, job_id, base + f"/s/{share['code']}", embed.json()["url"]
        )
    assert seen["green"] == "green light" and seen["phase"] == "succeeded"
    assert seen["share_button"] == 1
    assert seen["shared_url"].endswith(f"/jobs/{job_id}?share={share['code']}")
    assert (seen["shared_note"], seen["shared_button"]) == (1, 0) and seen["token_box_hidden"]
    assert seen["embed_title"] == "Robot lab"
    assert (seen["embed_artifacts"], seen["embed_charts"]) == (0, 0)
    assert "expired" in seen["expired_error"]
    assert seen["phone_overflow"] is True
    assert seen["focus_kept"] == f"/jobs/{job_id}"
    assert seen["unnamed"] == []


def browse_pages(base: str, node: str, pipeline_id: str, session_id: str) -> dict[str, Any]:
    seen: dict[str, Any] = {"unnamed": []}
    with chromium() as browser:
        page = browser.new_page()
        # nodes: the agent's node with its status
        page.goto(base + "/nodes")
        page.wait_for_selector(f"tr[data-node='{node}']")
        seen["node_status"] = page.locator(f"tr[data-node='{node}'] .phase").inner_text()
        seen["current"] = page.locator("nav a[aria-current='page']").inner_text()
        # the DAG: both stages, live to succeeded
        page.goto(base + f"/pipelines/{pipeline_id}")
        page.wait_for_selector("li[data-stage='report'] .phase-succeeded", timeout=60_000)
        seen["levels"] = page.locator("#dag .dag-level").count()
        seen["prep_phase"] = page.locator("li[data-stage='prep'] .phase").inner_text()
        seen["unnamed"] += page.evaluate(UNNAMED)
        # sessions: listed, and stopped with the keyboard
        page.goto(base + "/sessions")
        stop = page.locator(f"tr[data-session='{session_id}'] button >> text=Stop")
        stop.wait_for()
        seen["unnamed"] += page.evaluate(UNNAMED)
        page.wait_for_selector(f"tr[data-session='{session_id}'] .services >> text=svc")
        seen["services"] = page.locator(f"tr[data-session='{session_id}'] .services").inner_text()
        stop.focus()
        handle = stop.element_handle()
        page.wait_for_function("(el) => !el.isConnected", arg=handle)  # a live refresh
        seen["stop_focused"] = page.evaluate("document.activeElement.dataset.focus")
        page.keyboard.press("Enter")  # still on Stop after the refresh
        page.wait_for_selector(
            f"tr[data-session='{session_id}'] .phase-stopped, "
            f"tr[data-session='{session_id}'] .phase-stopping",
            timeout=30_000,
        )
        # submit: a bad config value is shown, nothing is created; a good one runs
        page.goto(base + "/submit")
        page.select_option("#submit-stack", "sim-cartpole")
        page.fill("#config-episodes", "0")
        page.click("#submit-form button[type=submit]")
        page.wait_for_selector("#submit-problems li")
        seen["problem"] = page.locator("#submit-problems li").first.inner_text()
        # its launch task (the first, chosen for you) shows only its settings; a preset,
        # picked with the keyboard, fills them in
        seen["task"] = page.locator("#submit-task").input_value()
        seen["task_fields"] = page.eval_on_selector_all(
            "#submit-config [data-key]", "(els) => els.map((e) => e.dataset.key)"
        )
        page.focus("#preset-none")
        page.keyboard.press("ArrowRight")  # radio group: the next preset, "quick"
        seen["preset_episodes"] = page.input_value("#config-episodes")
        seen["unnamed"] += page.evaluate(UNNAMED)
        page.click("#submit-form button[type=submit]")
        page.wait_for_url("**/jobs/job_*")
        seen["preset_job"] = page.url.rsplit("/", 1)[1]
        page.wait_for_selector("#timeline >> text=attempt 1 on pagesnode", timeout=60_000)
        seen["timeline"] = page.locator("#timeline").inner_text()
        page.goto(base + "/submit")
        page.select_option("#submit-stack", "shell")
        page.fill("#submit-command", "echo from-the-form")
        page.click("#submit-form button[type=submit]")
        page.wait_for_url("**/jobs/job_*")
        page.wait_for_selector("#logs >> text=from-the-form", timeout=60_000)
        seen["submitted"] = page.url
        # a sweep from the form: one job array, its jobs listed with their counts
        page.goto(base + "/submit")
        page.select_option("#submit-stack", "shell")
        page.fill("#submit-command", 'echo "$RUNPLANE_CONFIG_MESSAGE"')
        page.fill("#submit-sweep", "message=left,right")
        page.click("#submit-form button[type=submit]")
        page.wait_for_url("**/?array=arr_*")
        page.wait_for_selector("#array-counts >> text=2 succeeded", timeout=60_000)
        seen["array_counts"] = page.locator("#array-counts").inner_text()
        seen["array_rows"] = page.locator("tr[data-job]").count()
        seen["unnamed"] += page.evaluate(UNNAMED)
    return seen


async def test_the_nodes_pipelines_sessions_and_submit_pages(
    server: LiveServer, start_agent: StartAgent
) -> None:
    start_agent(server.url, "pagesnode", "--max-concurrency", "4")
    async with server.client() as client:
        nodes = await wait_for(lambda: online_nodes(client), 30, "the agent")
        run = await client.post(
            "/v1/pipelines",
            json={
                "stages": [
                    {"name": "prep", "stack": "shell", "command": ["true"]},
                    {"name": "report", "stack": "shell", "command": ["true"], "needs": ["prep"]},
                ]
            },
        )
        assert run.status_code == 202, run.text
        session = await client.post(
            "/v1/sessions",
            json={
                "pod": {
                    "services": [{"name": "svc", "stack": "shell", "command": ["sleep", "600"]}]
                }
            },
        )
        assert session.status_code == 202, session.text
        seen = await trio.to_thread.run_sync(
            browse_pages,
            server.url.rstrip("/"),
            nodes[0]["id"],
            run.json()["pipeline_run_id"],
            session.json()["id"],
        )
        preset_job = (await client.get(f"/v1/jobs/{seen['preset_job']}")).json()
    assert seen["node_status"] == "online" and seen["current"] == "Nodes"
    assert seen["levels"] == 2 and seen["prep_phase"] == "succeeded"
    assert seen["stop_focused"] == f"{session.json()['id']}:stop"
    assert seen["services"] == "svc (shell)"
    assert seen["problem"].startswith("config.episodes")
    assert seen["task"] == "balance"
    assert seen["task_fields"] == ["episodes", "max_steps", "policy", "epsilon"]
    assert seen["preset_episodes"] == "3"
    # the task's config under the preset's: what the form sent
    assert preset_job["spec"]["config"]["episodes"] == 3
    assert preset_job["spec"]["config"]["max_steps"] == 100
    assert "attempt 1 on pagesnode" in seen["timeline"]  # the node's name
    assert "/jobs/job_" in seen["submitted"]
    assert seen["array_counts"].startswith("2 jobs (a sweep of message)")
    assert seen["array_rows"] == 2
    assert seen["unnamed"] == []


STREAMING = (
    'for i in 1 2 3; do printf \'{"x": %d}\\n\' "$i" >> "$RUNPLANE_STREAMS_DIR/probe"; '
    "sleep 0.2; done; sleep 1"
)


def watch_stream(base: str, job_id: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    with chromium() as browser:
        page = browser.new_page()
        page.goto(base + f"/jobs/{job_id}")
        page.wait_for_selector("#recording >> text=stream chunks")
        seen["recording"] = page.locator("#recording").inner_text()
        page.click("text=Watch probe")
        page.wait_for_selector("dl[data-stream='probe'] dd[data-key='x'] >> text=3")
        seen["x"] = page.locator("dl[data-stream='probe'] dd[data-key='x']").inner_text()
    return seen


async def test_the_run_view_watches_a_stream_and_sums_up_the_recording(
    server: LiveServer, start_agent: StartAgent
) -> None:
    start_agent(server.url, "streamnode")
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        job_id = await submit(client, {"stack": "shell", "command": ["sh", "-c", STREAMING]})
        done = await wait_phase(client, job_id, "succeeded", "failed")
        assert done["phase"] == "succeeded", done
        seen = await trio.to_thread.run_sync(watch_stream, server.url.rstrip("/"), job_id)
    assert seen["x"] == "3"
    assert "3 stream chunks" in seen["recording"]


async def test_the_pages_are_one_shell_and_the_assets_are_served(server: LiveServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        for path in (
            "/",
            "/jobs/job_x",
            "/embed?e=x&j=y",
            "/submit",
            "/nodes",
            "/pipelines",
            "/pipelines/plr_x",
            "/sessions",
        ):
            page = await client.get(path)
            assert page.status_code == 200 and '<main id="view"' in page.text, path
        for asset in ("/static/app.js", "/static/app.css"):
            assert (await client.get(asset)).status_code == 200


DRIVEN = (
    'printf \'{"ready": 1}\\n\' >> "$RUNPLANE_STREAMS_DIR/control"; i=0; '
    'while [ ! -s "$RUNPLANE_STREAMS_DIR/control.teleop" ] && [ $i -lt 600 ]; do '
    "sleep 0.1; i=$((i+1)); done; "
    'echo "got $(cat "$RUNPLANE_STREAMS_DIR/control.teleop")"'
)


def drive_stream(base: str, job_id: str, share_url: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    with chromium() as browser:
        # the read-only share view watches the stream but gets no teleop box
        shared = browser.new_page()
        shared.goto(share_url)
        shared.click("text=Watch control")
        shared.wait_for_selector("dl[data-stream='control'] dd[data-key='ready']")
        seen["shared_teleop"] = shared.locator("form[data-teleop]").count()
        # the owner's view drives it: a JSON frame sent with the ticket
        page = browser.new_page()
        page.goto(base + f"/jobs/{job_id}")
        page.click("text=Watch control")
        page.wait_for_selector("form[data-teleop='control']")
        page.fill("#teleop-control", "not json")
        page.click("form[data-teleop='control'] button")
        seen["bad_frame"] = page.locator("form[data-teleop='control'] output").inner_text()
        page.fill("#teleop-control", '{"push": 0.5}')
        page.click("form[data-teleop='control'] button")
        page.wait_for_selector("form[data-teleop='control'] output >> text=sent")
        seen["sent"] = page.locator("form[data-teleop='control'] output").inner_text()
        page.wait_for_selector("#logs >> text=got", timeout=60_000)
        seen["log"] = page.locator("#logs >> text=got").inner_text()
        seen["unnamed"] = page.evaluate(UNNAMED)
    return seen


async def test_the_run_view_drives_a_stream_and_a_share_link_cannot(
    server: LiveServer, start_agent: StartAgent
) -> None:
    start_agent(server.url, "drivenode")
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        job_id = await submit(client, {"stack": "shell", "command": ["sh", "-c", DRIVEN]})

        async def control_listed() -> bool:
            job = (await client.get(f"/v1/jobs/{job_id}")).json()
            return any(st["name"] == "control" for st in job.get("streams") or [])

        await wait_for(control_listed, 60, "the control stream")
        share = (await client.post(f"/v1/jobs/{job_id}/share")).json()
        # the server, not the page, refuses: a share code's ticket may watch, not drive
        shared_ticket = await client.post(
            f"/v1/jobs/{job_id}/streams/control/subscribe",
            headers={"X-Share-Token": share["code"]},
        )
        assert shared_ticket.status_code == 200, shared_ticket.text
        assert shared_ticket.json()["teleop"] is False
        refused = await client.post(
            f"/v1/jobs/{job_id}/streams/control/teleop",
            json={"push": 1},
            headers={"Authorization": f"Bearer {shared_ticket.json()['ticket']}"},
        )
        assert refused.status_code == 403, refused.text
        base = server.url.rstrip("/")
        seen = await trio.to_thread.run_sync(
            drive_stream, base, job_id, base + f"/s/{share['code']}"
        )
        done = await wait_phase(client, job_id, "succeeded", "failed")
    assert seen["shared_teleop"] == 0
    assert seen["bad_frame"] == "not JSON: fix the frame"
    assert seen["sent"].startswith("sent, seq ")
    assert '"frame":{"push":0.5}' in seen["log"].replace(" ", "")
    assert done["phase"] == "succeeded"
    assert seen["unnamed"] == []
