"""The MCP facade driven by the official MCP Python SDK client over Streamable HTTP
against a live server with auth required (docs/mcp.md): it initializes, lists the eleven
tools with their schemas and annotations, submits a job and reads it back; a viewer's
submit_job is refused by scope and another org's job is not found, each a result with
``isError`` carrying the problem; an unknown tool is a JSON-RPC error."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.auth.support import bearer
from tests.e2e.conftest import ADMIN, e2e_settings, start_server

mcp = pytest.importorskip("mcp")

TOOLS = {
    "list_stacks",
    "submit_job",
    "preflight_job",
    "get_job",
    "list_jobs",
    "get_logs",
    "list_artifacts",
    "cancel_job",
    "rerun_job",
    "get_nodes",
    "entitlements",
}


def drive(url: str, token: str, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Run the SDK client (anyio on asyncio, in this worker thread): initialize, list the
    tools, then make ``calls`` in order; each call's result or error message."""
    import anyio
    import httpx2
    from mcp import ClientSession, MCPError
    from mcp.client.streamable_http import streamable_http_client

    seen: dict[str, Any] = {"calls": []}

    async def main() -> None:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            streamable_http_client(url, http_client=http, terminate_on_close=False) as (
                read,
                write,
            ),
            ClientSession(read, write) as session,
        ):
            init = await session.initialize()
            seen["server"] = init.server_info.name
            listed = await session.list_tools()
            seen["tools"] = {t.name: t for t in listed.tools}
            for name, arguments in calls:
                try:
                    result = await session.call_tool(name, arguments)
                    seen["calls"].append(("ok", result.structured_content, result.is_error))
                except MCPError as exc:
                    seen["calls"].append(("error", str(exc), None))

    anyio.run(main)
    return seen


async def test_the_official_client_lists_and_calls_tools(
    nursery: trio.Nursery, tmp_path: Any
) -> None:
    live = await start_server(nursery, e2e_settings(tmp_path / "server", auth="required"))
    async with live.client() as client:
        admin = bearer(ADMIN)

        async def mint(**body: Any) -> str:
            response = await client.post("/v1/auth/tokens", json=body, headers=admin)
            assert response.status_code == 201, response.text
            return str(response.json()["token"])

        member = await mint(subject="mo", org_id="org_default", role="member")
        viewer = await mint(subject="vera", org_id="org_default", role="viewer")
        stranger = await mint(subject="eve", org_id="org_other", role="owner")
    url = live.url.rstrip("/") + "/mcp"
    job = {"stack": "shell", "command": ["echo", "from mcp"]}
    seen = await trio.to_thread.run_sync(
        drive, url, member, [("submit_job", job), ("list_jobs", {"limit": 5})]
    )
    assert seen["server"] == "runplane"
    assert set(seen["tools"]) == TOOLS
    submit = seen["tools"]["submit_job"]
    assert submit.input_schema["required"] == ["stack"]
    assert submit.annotations.read_only_hint is False
    assert seen["tools"]["get_job"].annotations.read_only_hint is True
    assert seen["tools"]["cancel_job"].annotations.destructive_hint is True
    status, created, is_error = seen["calls"][0]
    assert (status, is_error) == ("ok", False)
    assert created["phase"] == "queued" and created["stack"] == "shell"
    job_id = created["job_id"]
    listed = seen["calls"][1][1]
    assert job_id in {j["job_id"] for j in listed["items"]}

    # a viewer may read but not submit; another org does not see the job
    as_viewer = await trio.to_thread.run_sync(
        drive, url, viewer, [("submit_job", job), ("get_job", {"job_id": job_id})]
    )
    refused, read = as_viewer["calls"]
    # a failing tool is a result with isError (the model sees it), not a JSON-RPC error
    assert refused[0] == "ok" and refused[2] is True
    assert refused[1]["status"] == 403 and refused[1]["code"] == "missing_scope"
    assert "runs:submit" in refused[1]["detail"]
    assert read[0] == "ok" and read[1]["job_id"] == job_id and read[2] is False
    as_stranger = await trio.to_thread.run_sync(
        drive, url, stranger, [("get_job", {"job_id": job_id}), ("nope", {})]
    )
    hidden, unknown_tool = as_stranger["calls"]
    assert hidden[0] == "ok" and hidden[2] is True
    assert (hidden[1]["status"], hidden[1]["detail"]) == (404, "job not found")
    # a protocol error (an unknown tool) is still a JSON-RPC error the SDK raises
    assert unknown_tool[0] == "error" and "unknown tool" in unknown_tool[1]
    live.stop.set()
