"""Property: no route answers 5xx to hostile input (#13 item 3), on SQLite and PostgreSQL.

Hypothesis draws a route of the app's url_map (every HTTP route but Quart's static
files), hostile path parameters (NUL and other control characters, lone surrogates,
traversal, very long ids), hostile query names and values (the route's own parameters
and others: int64 overflow, NUL, non-numbers) and a hostile body (deep nesting, integers
of thousands of digits, non-finite numbers, NUL and lone surrogates in strings and keys,
random JSON, bytes that are not JSON), and sends it as admin so it reaches the handler.
Every answer must be below 500, and must come (a hang is a failure too).
"""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from quart_trio import QuartTrio

from runplane.http.app import create_app
from runplane.http.query import QUERY_ATTR
from runplane.settings import Settings, load_settings
from tests.auth.support import ADMIN_H

BACKENDS = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)

#: Examples per backend, each a fresh app taking up to PER_APP requests.
EXAMPLES = 120
PER_APP = 10
HOSTILE_CHARS = ["\x00", "\x01", "\x1f", "\x7f", "\ud83d", "\udc00", "\ufffe", "é", "🚀", "%"]
HOSTILE_IDS = ["..", "../..", "job_", "a" * 2000, "%2F", "null", "0", "-1", "1e999"]

hostile_text = st.one_of(
    st.text(max_size=30),
    st.sampled_from(HOSTILE_CHARS + HOSTILE_IDS),
    st.lists(st.sampled_from([*HOSTILE_CHARS, "a", "b", "_"]), max_size=8).map("".join),
)
number_literal = st.one_of(
    st.sampled_from(
        [
            "1" * 4400,
            "-" + "9" * 25,
            "9223372036854775808",
            "-9223372036854775809",
            "1e999",
            "-1e999",
            "NaN",
            "Infinity",
            "0.000000000000000000000000001",
        ]
    ),
    st.integers().map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)


def _json_text(value: Any) -> str:
    """JSON text of a value whose strings may hold lone surrogates (escaped as \\udXXX)."""
    return json.dumps(value, ensure_ascii=True)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), hostile_text),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(hostile_text, children, max_size=4),
    ),
    max_leaves=12,
)
FIELDS = ["stack", "command", "env", "seed", "priority", "project", "limits", "config", "tier"]


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["deep", "number", "field", "random", "bytes", "none"]))
    if kind == "deep":
        depth = draw(st.integers(60, 5000))
        opener = draw(st.sampled_from(["[", '{"a":']))
        closer = "]" if opener == "[" else "}"
        return (opener * depth + "1" + closer * depth).encode()
    if kind == "number":
        field = draw(st.sampled_from(["seed", "priority", "limits", "tier", "ttl_sec"]))
        literal = draw(number_literal)
        inner = f'{{"cpu_cores": {literal}}}' if field == "limits" else literal
        return f'{{"stack": "shell", "command": ["true"], "{field}": {inner}}}'.encode()
    if kind == "field":
        field = draw(st.sampled_from(FIELDS))
        body = {"stack": "shell", "command": ["true"], field: draw(json_values)}
        return _json_text(body).encode()
    if kind == "random":
        return _json_text(draw(json_values)).encode()
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    return b""


def _encode(text: str) -> str:
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


@pytest.fixture
def make_app(
    backend: str, make_settings: Callable[..., Settings], request: pytest.FixtureRequest
) -> Callable[[], QuartTrio]:
    """A fresh app per example (each hypothesis example runs in its own trio run); on
    PostgreSQL they share one database, migrated by the first."""
    env = {} if backend == "sqlite" else {"database_url": request.getfixturevalue("pg_database")}
    return lambda: create_app(make_settings(**env))


@functools.cache
def _routes() -> list[tuple[str, Any, tuple[str, ...]]]:
    """(method, rule, declared query parameters) of every HTTP route but static files."""
    data_dir = Path(tempfile.mkdtemp(prefix="rp-fuzz-"))
    app = create_app(load_settings({"RUNPLANE_DATA_DIR": str(data_dir)}))  # not served
    out = []
    for rule in app.url_map.iter_rules():
        if rule.websocket or rule.endpoint == "static":
            continue
        view = app.view_functions[rule.endpoint]
        declared = tuple(getattr(view, QUERY_ATTR, ()) or ())
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            out.append((method, rule, declared))
    return out


@st.composite
def hostile_requests(draw: st.DrawFn) -> tuple[str, str, bytes]:
    method, rule, declared = draw(st.sampled_from(_routes()))
    path = rule.rule
    for name in rule.arguments:
        value = draw(hostile_text.filter(lambda s: s != ""))
        path = path.replace(f"<{name}>", _encode(value))
        path = path.replace(f"<anykey:{name}>", _encode(value))
    names = st.one_of(st.sampled_from(declared), hostile_text) if declared else hostile_text
    query = draw(st.lists(st.tuples(names, st.one_of(hostile_text, number_literal)), max_size=3))
    if query:
        path += "?" + "&".join(f"{_encode(k)}={_encode(v)}" for k, v in query)
    body = draw(bodies()) if method in ("POST", "PUT") else b""
    return method, path, body


@BACKENDS
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(requests=st.lists(hostile_requests(), min_size=1, max_size=PER_APP))
async def test_no_route_answers_5xx_to_hostile_input(
    make_app: Callable[[], QuartTrio], requests: list[tuple[str, str, bytes]]
) -> None:
    app = make_app()
    headers = {**ADMIN_H, "Content-Type": "application/json"}
    async with app.test_app():
        client = app.test_client()
        for method, path, body in requests:
            with trio.fail_after(30):  # a hang detector, not a timing assertion
                response = await client.open(path, method=method, data=body, headers=headers)
                text = await response.get_data(as_text=True)
            assert response.status_code < 500, f"{method} {path} -> {response.status_code}: {text}"


def test_the_fuzz_covers_every_http_route() -> None:
    endpoints = {rule.endpoint for _, rule, _ in _routes()}
    assert {"jobs.submit", "jobs.cancel", "runs.list_runs", "orgs.remove_member"} <= endpoints
    assert len(_routes()) >= 45
