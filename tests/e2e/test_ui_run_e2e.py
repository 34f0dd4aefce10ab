"""The run view in Chromium against a real server and agent (issue 40, items 4, 7 and 8):
it stays live while the job runs (the duration counts up, node by name) and ends equal to
the API without a reload (both artifacts, the chunk count, the final metric, the
recording); the command reads as one line with the whole of it under a <details> in the
run, share and embed views; the Pause button sits beside the logs and goes once the job
ended; empty panels say how a job makes an artifact or a stream; a phone's width fits."""

from __future__ import annotations

import shlex
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e.conftest import (
    LiveServer,
    StartAgent,
    job,
    online_nodes,
    submit,
    wait_for,
    wait_phase,
)
from tests.e2e.test_ui_browser_e2e import UNNAMED, chromium, pytestmark  # noqa: F401

#: 150 stream chunks, a metric, two artifacts, then a wait on the test's gate file (so
#: the page is open while the job runs). No single quote: shlex.join and the page's
#: shellJoin quote a word alike then.
SCRIPT = """i=0
while [ $i -lt 150 ]; do echo "{\\"i\\": $i}" >> "$RUNPLANE_STREAMS_DIR/telemetry"; i=$((i+1)); done
echo "::metric {\\"step\\": 1, \\"loss\\": 0.5}"
mkdir -p out && echo a > out/a.txt && echo b > out/b.txt
while [ ! -e "$GATE" ]; do sleep 0.2; done
echo finished"""

PHONE = {"width": 390, "height": 844}
FITS = "document.documentElement.scrollWidth <= window.innerWidth"
#: The token box shows its whole placeholder (its text measured in the box's font).
TOKEN_FITS = """(() => {
  const box = document.getElementById("token"), style = getComputedStyle(box);
  const pen = document.createElement("canvas").getContext("2d");
  pen.font = style.font;
  const room = box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  return box.scrollWidth <= box.clientWidth && pen.measureText(box.placeholder).width <= room;
})()"""


def live_run(base: str, job_id: str, gate: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    with chromium() as browser:
        page = browser.new_page()
        page.goto(base + f"/jobs/{job_id}")
        page.wait_for_selector("#phase .phase-running", timeout=60_000)
        page.wait_for_selector("#timeline >> text=attempt 1 on")
        # live: the duration counts up without a reload; the node by its name
        first = page.locator("#duration").inner_text()
        page.wait_for_function(
            "(first) => document.getElementById('duration').textContent !== first", arg=first
        )
        seen["node"] = page.locator("#node .node").inner_text()
        seen["node_title"] = page.locator("#node .node").get_attribute("title")
        seen["timeline"] = page.locator("#timeline").inner_text()
        seen["created_title"] = page.locator("#facts time").first.get_attribute("title")
        seen["created"] = page.locator("#facts time").first.inner_text()
        # the Pause button: small, beside the logs (not in a heading), shown while live
        seen["follow_visible"] = page.locator("#follow").is_visible()
        seen["follow_in_heading"] = page.evaluate(
            "!!document.getElementById('follow').closest('h2')"
        )
        seen["follow_small"] = page.evaluate(
            """() => parseFloat(getComputedStyle(document.getElementById('follow')).fontSize)
                < parseFloat(getComputedStyle(document.querySelector('.logs-panel h2')).fontSize)"""
        )
        # the command: one line, the whole under <details>
        seen["summary"] = page.locator("#command summary").inner_text()
        page.click("#command summary")
        seen["whole"] = page.locator("#command pre").inner_text()
        seen["unnamed"] = page.evaluate(UNNAMED)
        # a phone: the running view fits its width
        phone = browser.new_page(viewport=PHONE)
        phone.goto(base + f"/jobs/{job_id}")
        phone.wait_for_selector("#facts")
        phone.wait_for_selector("#logs >> text=running:")
        seen["phone_fits"] = phone.evaluate(FITS)
        seen["token_fits"] = page.evaluate(TOKEN_FITS)
        # the job ends: the page, not reloaded, turns final
        gate.touch()
        page.wait_for_selector("#phase .phase-succeeded", timeout=60_000)
        page.wait_for_selector("#artifacts li >> nth=1", timeout=30_000)
        page.wait_for_selector("#recording >> text=stream chunks")
        page.wait_for_function(
            "document.querySelector('#recording').textContent.includes('150 stream chunks')"
        )
        seen["artifacts"] = page.eval_on_selector_all(
            "#artifacts li a", "(links) => links.map((a) => a.getAttribute('href'))"
        )
        seen["count"] = page.locator("[data-count='telemetry']").inner_text()
        seen["loss"] = page.locator("#final-metrics dd[data-key='loss']").inner_text()
        seen["follow_hidden"] = page.locator("#follow").is_hidden()
        seen["logs"] = page.locator("#logs").inner_text()
        seen["exit"] = page.locator("#exit-code").inner_text()
    return seen


@pytest.fixture(name="gate")
def gate_fixture() -> Iterator[Path]:
    """A file the job waits for, in a directory the job's user can look into."""
    top = Path(tempfile.mkdtemp(prefix="runplane-uib-"))
    top.chmod(0o755)
    yield top / "gate"
    shutil.rmtree(top, ignore_errors=True)


async def test_the_run_view_stays_live_and_ends_equal_to_the_api(
    server: LiveServer, start_agent: StartAgent, gate: Path
) -> None:
    start_agent(server.url, "uibnode")
    argv = ["sh", "-c", SCRIPT]
    async with server.client() as client:
        nodes = await wait_for(lambda: online_nodes(client), 30, "the agent")
        job_id = await submit(
            client,
            {
                "stack": "shell",
                "command": argv,
                "env": {"GATE": str(gate)},
                "outputs": [{"artifact": "texts", "glob": "out/*.txt"}],
            },
        )
        base = server.url.rstrip("/")
        seen = await trio.to_thread.run_sync(live_run, base, job_id, gate)
        final = await job(client, job_id)
    assert final["phase"] == "succeeded"
    # final, as the API says
    assert sorted(seen["artifacts"]) == sorted(a["ref"] for a in final["artifacts"])
    assert len(seen["artifacts"]) == 2
    count = next(s["count"] for s in final["streams"] if s["name"] == "telemetry")
    assert count == 150 and seen["count"] == f"{count} chunks"
    assert seen["loss"] == "0.5" and seen["follow_hidden"] and seen["exit"] == "0"
    # facts that read
    assert (seen["node"], seen["node_title"]) == ("uibnode", nodes[0]["id"])
    assert "attempt 1 on uibnode" in seen["timeline"] and "on node" not in seen["timeline"]
    assert seen["created"].endswith("ago") and seen["created_title"]
    assert seen["follow_visible"] and not seen["follow_in_heading"] and seen["follow_small"]
    # the command: its first line and how many follow; the whole, with its line breaks
    lines = shlex.join(argv).split("\n")
    assert seen["summary"] == f"{lines[0]} \u2026 (+{len(lines) - 1} lines)"
    assert seen["whole"] == shlex.join(argv)
    running = next(line for line in seen["logs"].splitlines() if line.startswith("running:"))
    assert running == f"running: {lines[0]} \u2026 (+{len(lines) - 1} lines)"
    assert "full command" not in seen["logs"] and "\\n" not in running
    # the layout
    assert seen["phone_fits"] and seen["token_fits"]
    assert seen["unnamed"] == []


def shared_and_embedded(base: str, job_id: str, share_url: str, embed_url: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    with chromium() as browser:
        for name, url in (
            ("run", f"{base}/jobs/{job_id}"),
            ("share", share_url),
            ("embed", embed_url),
        ):
            page = browser.new_page(viewport=PHONE)
            page.goto(url)
            page.wait_for_selector("#command summary")
            page.wait_for_selector("#logs >> text=running:")
            page.click("#command summary")
            seen[f"{name}_summary"] = page.locator("#command summary").inner_text()
            seen[f"{name}_whole"] = page.locator("#command pre").inner_text()
            seen[f"{name}_text"] = page.locator("#view").inner_text()
            seen[f"{name}_fits"] = page.evaluate(FITS)
            if name == "run":
                page.wait_for_selector("#artifacts-empty")
                seen["artifacts_hint"] = page.locator("#artifacts-empty").inner_text()
                seen["streams_hint"] = page.locator("#streams-empty").inner_text()
                seen["follow_hidden"] = page.locator("#follow").is_hidden()
    return seen


async def test_the_command_reads_in_the_run_share_and_embed_views(
    server: LiveServer, start_agent: StartAgent
) -> None:
    start_agent(server.url, "cmdnode")
    argv = ["python3", "-c", "import sys\n\nprint('from python')\nsys.exit(0)"]
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        job_id = await submit(client, {"stack": "shell", "command": argv})
        done = await wait_phase(client, job_id, "succeeded", "failed")
        assert done["phase"] == "succeeded", done
        share = (await client.post(f"/v1/jobs/{job_id}/share")).json()
        embed = await client.post(f"/v1/jobs/{job_id}/embed", json={"allow": []})
        assert embed.status_code == 201, embed.text
        base = server.url.rstrip("/")
        embed_url = embed.json()["url"]  # (absolute, or relative to the server)
        embed_url = embed_url if embed_url.startswith("http") else base + embed_url
        seen = await trio.to_thread.run_sync(
            shared_and_embedded, base, job_id, share["url"], embed_url
        )
    for name in ("run", "share", "embed"):
        assert seen[f"{name}_summary"] == "python3 -c 'import sys \u2026 (+3 lines)", name
        assert (
            seen[f"{name}_whole"]
            == "python3 -c 'import sys\n\nprint('\\''from python'\\'')\nsys.exit(0)'"
        )
        assert "\\n" not in seen[f"{name}_text"] and "GET /v1/jobs" not in seen[f"{name}_text"]
        assert seen[f"{name}_fits"], name
    assert "outputs" in seen["artifacts_hint"] and "--output" in seen["artifacts_hint"]
    assert "$RUNPLANE_STREAMS_DIR" in seen["streams_hint"]
    assert seen["follow_hidden"]
