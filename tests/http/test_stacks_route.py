"""GET /v1/stacks?view= and GET /v1/stacks/{name} over the catalog loaded at start-up."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runplane.http.app import create_app
from runplane.settings import Settings

BUILTIN = ["python", "shell", "sim-cartpole"]
FULL_FIELDS = [
    "name",
    "version",
    "image",
    "modes",
    "display_name",
    "description",
    "categories",
    "requires",
    "config",
    "metrics",
    "default_command",
    "default_outputs",
    "docs",
    "examples",
    "launch",
    "unavailable",
]
SUMMARY_FIELDS = {
    "name",
    "version",
    "display_name",
    "description",
    "categories",
    "modes",
    "unavailable",
    "requires",
}


@pytest.mark.parametrize("query", ["", "?view=", "?view=full"])
async def test_full_view_is_the_default(client: Any, query: str) -> None:
    response = await client.get(f"/v1/stacks{query}")
    assert response.status_code == 200
    stacks = await response.get_json()
    assert [s["name"] for s in stacks] == BUILTIN
    assert all(list(s) == FULL_FIELDS for s in stacks)
    cartpole = stacks[2]
    assert [f["key"] for f in cartpole["config"]] == [
        "episodes",
        "max_steps",
        "policy",
        "epsilon",
        "realtime",
    ]
    assert cartpole["unavailable"] is False


async def test_summary_view(client: Any) -> None:
    stacks = await (await client.get("/v1/stacks?view=summary")).get_json()
    assert [s["name"] for s in stacks] == BUILTIN
    assert all(set(s) == SUMMARY_FIELDS for s in stacks)


async def test_launch_view_omits_image_docs_examples(client: Any) -> None:
    stacks = await (await client.get("/v1/stacks?view=launch")).get_json()
    assert [s["name"] for s in stacks] == BUILTIN
    for s in stacks:
        assert set(s) == set(FULL_FIELDS) - {"image", "docs", "examples"}
        assert "config" in s and "requires" in s and "launch" in s


@pytest.mark.parametrize("view", ["compact", "FULL", "summary,launch"])
async def test_unknown_view_is_400_naming_view_and_accepted_values(client: Any, view: str) -> None:
    response = await client.get("/v1/stacks", query_string={"view": view})
    assert response.status_code == 400
    assert response.headers["Content-Type"] == "application/problem+json"
    body = await response.get_json()
    assert body["code"] == "invalid_query"
    assert body["errors"] == [
        {
            "key": "view",
            "code": "not_allowed",
            "message": f"unknown view {view!r}; accepted: full, launch, summary",
        }
    ]
    assert "full, launch, summary" in body["detail"]


async def test_one_stack(client: Any) -> None:
    response = await client.get("/v1/stacks/sim-cartpole")
    assert response.status_code == 200
    stack = await response.get_json()
    assert list(stack) == FULL_FIELDS
    assert stack["name"] == "sim-cartpole"
    summary = await (await client.get("/v1/stacks/shell?view=summary")).get_json()
    assert set(summary) == SUMMARY_FIELDS
    bad = await client.get("/v1/stacks/shell?view=nope")
    assert bad.status_code == 400


async def test_unknown_stack_is_404_listing_what_exists(client: Any) -> None:
    response = await client.get("/v1/stacks/tensorflow")
    assert response.status_code == 404
    body = await response.get_json()
    assert body["code"] == "not_found"
    assert "'tensorflow'" in body["detail"]
    assert "python, shell, sim-cartpole" in body["detail"]


async def test_extra_stacks_dir_is_listed(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    extra = tmp_path / "stacks"
    extra.mkdir()
    (extra / "echo.toml").write_text(
        'name = "echo"\nversion = "0.1.0"\nimage = "busybox"\nunavailable = true\n'
    )
    application = create_app(make_settings(stacks_dir=str(extra)))
    async with application.test_app():
        client = application.test_client()
        stacks = await (await client.get("/v1/stacks?view=summary")).get_json()
        assert [s["name"] for s in stacks] == ["echo", *BUILTIN]
        assert stacks[0]["unavailable"] is True
        echo = await (await client.get("/v1/stacks/echo")).get_json()
        assert echo["image"] == "busybox"
