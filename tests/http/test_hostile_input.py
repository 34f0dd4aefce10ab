"""Hostile input is a 400 naming what is wrong, never a 500 (#13 item 3), on SQLite and
PostgreSQL: deeply nested JSON, integers outside int64 (4,400 digits too), non-finite
numbers, lone surrogates and NULs in body strings, control characters in path ids and
query values, and an ``offset`` beyond int64. Before the fix each of these was a 500
(RecursionError, ValueError, UnicodeEncodeError, OverflowError, psycopg.DataError)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from quart_trio import QuartTrio

from runplane.http.app import create_app
from runplane.http.input_checks import MAX_DEPTH
from runplane.settings import Settings
from tests.auth.support import ADMIN_H

pytestmark = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)


@pytest.fixture
async def app(
    backend: str, make_settings: Callable[..., Settings], request: pytest.FixtureRequest
) -> AsyncIterator[QuartTrio]:
    env = {} if backend == "sqlite" else {"database_url": request.getfixturevalue("pg_database")}
    application = create_app(make_settings(**env))
    async with application.test_app():
        yield application


@pytest.fixture
def client(app: QuartTrio) -> Any:
    return app.test_client()


async def problem(response: Any, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, await response.get_data(as_text=True)
    assert response.headers["Content-Type"].startswith("application/problem+json")
    body: dict[str, Any] = await response.get_json()
    return body


def keys(body: dict[str, Any]) -> list[str]:
    return [e["key"] for e in body.get("errors", [])]


async def post_raw(client: Any, path: str, raw: str | bytes) -> Any:
    data = raw.encode() if isinstance(raw, str) else raw
    headers = {**ADMIN_H, "Content-Type": "application/json"}
    return await client.post(path, data=data, headers=headers)


@pytest.mark.parametrize(
    "raw",
    [
        "[" * 3000 + "]" * 3000,
        '{"stack": "shell", "config": ' + '{"a": ' * 3000 + "1" + "}" * 3001,
        '{"a": ' + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "}",
    ],
    ids=["arrays", "objects", "just-over"],
)
async def test_deep_nesting_is_a_400(client: Any, raw: str) -> None:
    body = await problem(await post_raw(client, "/v1/jobs", raw))
    assert body["code"] == "too_deep"
    assert f"deeper than {MAX_DEPTH} levels" in body["detail"]


async def test_nesting_within_the_cap_is_parsed(client: Any) -> None:
    nested = "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2)
    raw = '{"stack": "shell", "command": ["true"], "config": {"deep": ' + nested + "}}"
    body = await problem(await post_raw(client, "/v1/jobs", raw), 422)
    assert body["code"] != "too_deep"  # the stack's config check answers, not the parser


@pytest.mark.parametrize(
    ("field", "literal"),
    [
        ("seed", "1" * 4400),
        ("seed", "9223372036854775808"),
        ("priority", "-" + "9" * 30),
        ("limits.timeout_sec", "1" * 4400),
        ("limits.cpu_cores", "1e999"),
        ("limits.ram_gb", "NaN"),
        ("limits.gpu_count", "-Infinity"),
    ],
)
async def test_numbers_no_field_takes_are_a_400_naming_the_field(
    client: Any, field: str, literal: str
) -> None:
    if "." in field:
        outer, inner = field.split(".")
        raw = f'{{"stack": "shell", "{outer}": {{"{inner}": {literal}}}}}'
    else:
        raw = f'{{"stack": "shell", "{field}": {literal}}}'
    for path in ("/v1/jobs", "/v1/runs", "/v1/runs/validate", "/v1/runs/resolve"):
        body = await problem(await post_raw(client, path, raw))
        assert body["code"] == "out_of_range", body
        assert keys(body) == [field], body


async def test_int64_fields_are_range_checked_as_typed(client: Any) -> None:
    raw = '{"stack": "shell", "priority": 9223372036854775807}'
    body = await problem(await post_raw(client, "/v1/jobs", raw))
    assert keys(body) == ["priority"]  # int64 fits the parser; priority is 32-bit


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"stack": "shell", "command": ["\\ud83d"]}', "command.0"),
        ('{"stack": "shell", "command": ["true"], "env": {"A": "x\\udc00y"}}', "env.A"),
        ('{"stack": "shell", "command": ["a\\u0000b"]}', "command.0"),
        ('{"stack": "shell", "command": ["true"], "project": "a\\u0000b"}', "project"),
        ('{"stack": "shell", "command": ["true"], "env": {"K\\u0000": "v"}}', "env.K\\x00"),
    ],
)
async def test_nul_and_lone_surrogates_in_strings_are_a_400(
    client: Any, raw: str, field: str
) -> None:
    for path in ("/v1/jobs", "/v1/runs", "/v1/runs/validate", "/v1/runs/resolve"):
        body = await problem(await post_raw(client, path, raw))
        assert body["code"] == "invalid_text", body
        assert keys(body) == [field], body


async def test_a_valid_non_ascii_body_still_works(client: Any) -> None:
    body = {"stack": "shell", "command": ["echo", "héllo 🚀"], "project": "ünï"}
    response = await client.post("/v1/jobs", json=body, headers=ADMIN_H)
    assert response.status_code == 202, await response.get_data(as_text=True)


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/runs"])
@pytest.mark.parametrize("offset", ["99999999999999999999", "9223372036854775808", "1" * 5000])
async def test_an_offset_beyond_int64_is_a_400(client: Any, path: str, offset: str) -> None:
    body = await problem(await client.get(f"{path}?offset={offset}", headers=ADMIN_H))
    assert keys(body) == ["offset"]


async def test_the_largest_offset_answers_an_empty_page(client: Any) -> None:
    response = await client.get("/v1/jobs?offset=9223372036854775807", headers=ADMIN_H)
    assert response.status_code == 200
    assert await response.get_json() == []


@pytest.mark.parametrize(
    ("method", "path", "name"),
    [
        ("POST", "/v1/jobs/%00/cancel", "job_id"),
        ("POST", "/v1/jobs/a%00b/rerun", "job_id"),
        ("GET", "/v1/jobs/%00", "job_id"),
        ("GET", "/v1/jobs/%00/logs", "job_id"),
        ("DELETE", "/v1/auth/tokens/%00", "token_id"),
        ("DELETE", "/v1/nodes/join-tokens/%00", "token_id"),
        ("DELETE", "/v1/orgs/org_default/members/a%00", "user_id"),
        ("POST", "/v1/orgs/%00/members", "org_id"),
        ("GET", "/v1/jobs?stack=%00", "stack"),
        ("GET", "/v1/jobs?project=a%00", "project"),
        ("GET", "/v1/runs?stack=%01", "stack"),
        ("GET", "/v1/jobs?%00=1", "\\x00"),
    ],
)
async def test_control_characters_in_ids_and_query_values_are_a_400(
    client: Any, method: str, path: str, name: str
) -> None:
    response = await client.open(path, method=method, headers=ADMIN_H)
    body = await problem(response)
    assert body["code"] == "invalid_text"
    assert keys(body) == [name], body
