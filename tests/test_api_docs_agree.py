"""docs/api.md and the OpenAPI document agree: the routes they list and the fields of the
views docs/api.md describes.

The document is the one the server serves (``build`` of the app, as ``GET /openapi.json``
answers it). docs/api.md writes a route as a ``### METHOD /path`` heading, a view's
fields as a table (``| `field` | ...``), as a paragraph ``Name: `field`, `field` (...),
...`` (``Name: the Job plus `field` ...`` for a view that adds to the Job) or as the
``{field, field: ..., ...}`` of an answer; each list must name exactly the properties of
the schema the document gives that view.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from runplane.http.app import create_app
from runplane.http.openapi.document import build
from runplane.settings import load_settings

from .test_docs import API_DOC, HEADING

#: routes docs/api.md lists that are not HTTP operations of the document (document.py
#: LEFT_OUT and the WebSocket), each with the reason
NOT_OPERATIONS = {
    "WEBSOCKET /v1/nodes/connect": "the agents' WebSocket is not an HTTP operation",
    "GET /static/{filename}": "Quart's static files are not an operation of the API",
}
_IDENT = re.compile(r"[a-z_][a-z0-9_]*")
_SPAN = re.compile(r"`([^`]*)`")


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data = tmp_path_factory.mktemp("docs-agree")
    app = create_app(load_settings({"RUNPLANE_DATA_DIR": str(data), "RUNPLANE_LOCAL_AGENT": "0"}))
    return build(app)


@pytest.fixture(scope="module")
def text() -> str:
    return API_DOC.read_text()


def section(text: str, heading: str) -> str:
    """The text under ``heading`` (a ``### `` line) up to the next heading."""
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    end = re.search(r"^#{2,4} ", text[start:], re.MULTILINE)
    return text[start : start + end.start()] if end else text[start:]


def resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """A view's object schema: through ``$ref``, a list's items (not its page's envelope),
    the first of several options."""
    while True:
        if "$ref" in schema:
            schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        elif "oneOf" in schema or "anyOf" in schema or "allOf" in schema:
            options = schema.get("oneOf") or schema.get("anyOf") or schema["allOf"]
            lists = [o for o in options if o.get("type") == "array"]  # a list, not its page
            schema = (lists or options)[0]
        elif schema.get("type") == "array":
            schema = schema["items"]
        else:
            return schema


def answer_schema(document: dict[str, Any], route: str) -> dict[str, Any]:
    method, path = route.split(" ", 1)
    responses = document["paths"][path][method.lower()]["responses"]
    status = min(s for s in responses if s.startswith("2"))
    return resolve(document, responses[status]["content"]["application/json"]["schema"])


def body_schema(document: dict[str, Any], route: str) -> dict[str, Any]:
    method, path = route.split(" ", 1)
    body = document["paths"][path][method.lower()]["requestBody"]
    return resolve(document, body["content"]["application/json"]["schema"])


def table_fields(part: str) -> set[str]:
    """The names in the first column of a field table (``| `a`, `b` | ...``)."""
    rows = [line.split("|")[1] for line in part.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in _SPAN.findall(row) if _IDENT.fullmatch(name)}


def _top_level(text: str) -> str:
    """``text`` without what parentheses enclose (a field's note, its values)."""
    out, depth = [], 0
    for char in text:
        depth += char == "("
        if depth == 0:
            out.append(char)
        depth -= char == ")" and depth > 0
    return "".join(out)


def paragraph_fields(text: str, name: str) -> set[str]:
    """The fields of a ``Name: `a` (...), `b`, ...`` paragraph: each backticked name outside
    parentheses, up to the paragraph's end or the next ``Other:`` paragraph."""
    start = re.search(rf"^{name}: ", text, re.MULTILINE)
    assert start, f"docs/api.md has no '{name}: ' paragraph"
    rest = text[start.end() :].split("\n\n", 1)[0]
    rest = re.split(r"\b[A-Z][A-Za-z]+View: ", rest, maxsplit=1)[0]
    # a backticked identifier stays, every other span (values, shapes) goes
    kept = _SPAN.sub(lambda m: f"`{m[1]}`" if _IDENT.fullmatch(m[1]) else "", rest)
    return set(_SPAN.findall(_top_level(kept)))


def brace_fields(part: str, after: str) -> set[str]:
    """The top-level keys of the first ``{...}`` in ``part`` after the text ``after``."""
    at = part.index(after) + len(after)
    start = part.index("{", at)
    depth, items, item = 0, [], ""
    for char in part[start + 1 :]:
        if char in "{[(":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                break
            depth -= 1
        if depth == 0 and char == ",":
            items.append(item)
            item = ""
        else:
            item += char
    items.append(item)
    return {m[0] for m in (_IDENT.match(i.strip()) for i in items) if m}


def test_every_route_of_the_document_has_a_section_and_no_other(
    document: dict[str, Any], text: str
) -> None:
    operations = {
        f"{method.upper()} {path}" for path, item in document["paths"].items() for method in item
    }
    sections = {f"{m} {p}" for m, p in HEADING.findall(text)}
    missing = sorted(operations - sections)
    assert not missing, f"operations of the document without a docs/api.md section: {missing}"
    extra = sorted(sections - operations)
    assert extra == sorted(NOT_OPERATIONS), (
        f"docs/api.md sections that are not operations of the document: {extra}"
    )


#: (docs/api.md: a table under this heading) -> the route whose answer is that view
TABLES = {
    "### Job": "GET /v1/jobs/{job_id}",
    "### GET /v1/ha": "GET /v1/ha",
}
#: (docs/api.md: a "Name: ..." paragraph) -> the route whose answer is that view
PARAGRAPHS = {
    "PipelineRun": "GET /v1/pipelines/{run_id}",
    "SessionView": "GET /v1/sessions/{session_id}",
    "Schedule": "GET /v1/schedules/{schedule_id}",
    "PolicyView": "GET /v1/policy",
}
#: (docs/api.md: a "Name: the Job plus ..." paragraph) -> the route whose answer is that view
JOB_PLUS = {
    "JobSubmitted": "POST /v1/jobs",
    "CancelResult": "POST /v1/jobs/{job_id}/cancel",
    "RunDetail": "GET /v1/runs/{run_id}",
}
#: the route whose section describes its answer as ``{...}``, and the text just before it
ANSWERS = {
    "GET /v1/nodes": "200 Node[]",
    "POST /v1/jobs/batch": "202 ",
    "GET /v1/arrays/{array_id}": "200 ",
    "POST /v1/arrays/{array_id}/cancel": "200 ",
    "GET /v1/jobs/{job_id}/logs": "200 JobLogs",
    "GET /v1/jobs/{job_id}/recording": "200 JobRecording",
    "POST /v1/jobs/{job_id}/share": "201 ShareResult",
    "DELETE /v1/jobs/{job_id}/share": "200 ",
    "POST /v1/jobs/{job_id}/embed": "201\nEmbedMintResult",
    "GET /v1/embed/grant": "200 EmbedGrantView",
    "GET /v1/runs": "200 RunRow[]",
    "POST /v1/runs/validate": "200 ",
    "POST /v1/runs/resolve": "200 ",
    "POST /v1/pipelines/validate": "200 ",
    "PATCH /v1/nodes/{node_id}": "200 NodePatchResult",
    "GET /v1/nodes/{node_id}/metrics": "200 NodeMetrics",
    "POST /v1/nodes/{node_id}/update": "200 NodeUpdateResult",
    "POST /v1/nodes/grants": "201 NodeGrantView",
    "GET /v1/nodes/grants": "200 ",
    "POST /v1/nodes/join-tokens": "201 ",
    "GET /v1/nodes/join-tokens": "200\n",
    "POST /v1/uploads": "200 ",
    "PUT /v1/artifacts/{key}": "201\n",
    "PUT /v1/secrets/{name}": "200 when replaced: ",
    "GET /v1/policy/preview": "200 PolicyPreview",
    "GET /v1/policy/preflight": "200 ",
    "GET /v1/me/entitlements": "200 ",
    "GET /v1/auth/whoami": "200 ",
    "POST /v1/auth/tokens": "201 ",
    "GET /v1/auth/tokens": "200 ",
    "POST /v1/auth/token": "200\n",
    "POST /v1/auth/seat": "201 ",
    "POST /v1/orgs/{org_id}/members": "201 ",
    "GET /v1/orgs/{org_id}/members": "200 ",
    "POST /v1/git/connections": "201 GitConnectionView",
    "POST /v1/webhooks": "201 WebhookCreated",
    "POST /v1/webhooks/{webhook_id}/test": "202 ",
    "GET /v1/webhooks/{webhook_id}/deliveries": "200 WebhookDelivery[]",
}


def _disagreement(documented: set[str], schema: dict[str, Any]) -> str:
    named = set(schema.get("properties", {}))
    problems = []
    if documented - named:
        problems.append(f"docs/api.md lists {sorted(documented - named)}, the document lacks them")
    if named - documented:
        problems.append(f"the document has {sorted(named - documented)}, docs/api.md lacks them")
    return "; ".join(problems)


def test_the_field_tables_and_view_paragraphs_name_the_schemas_fields(
    document: dict[str, Any], text: str
) -> None:
    found = {
        heading: _disagreement(table_fields(section(text, heading)), answer_schema(document, route))
        for heading, route in TABLES.items()
    }
    found["### SubmitJobBody"] = _disagreement(
        table_fields(section(text, "### SubmitJobBody")), body_schema(document, "POST /v1/jobs")
    )
    for name, route in PARAGRAPHS.items():
        found[name] = _disagreement(paragraph_fields(text, name), answer_schema(document, route))
    job = answer_schema(document, "GET /v1/jobs/{job_id}")["properties"]
    for name, route in JOB_PLUS.items():
        schema = answer_schema(document, route)
        assert set(job) <= set(schema["properties"]), f"{name} lacks fields of the Job"
        added = {"properties": {k: v for k, v in schema["properties"].items() if k not in job}}
        found[name] = _disagreement(paragraph_fields(text, name), added)
    wrong = {where: problem for where, problem in found.items() if problem}
    assert not wrong, wrong


def test_the_answers_docs_api_md_spells_out_name_the_schemas_fields(
    document: dict[str, Any], text: str
) -> None:
    found = {}
    for route, after in ANSWERS.items():
        documented = brace_fields(section(text, f"### {route}"), after)
        found[route] = _disagreement(documented, answer_schema(document, route))
    wrong = {route: problem for route, problem in found.items() if problem}
    assert not wrong, wrong


def test_the_parsers_read_what_they_should() -> None:
    """The readers above on known text (so a test that finds nothing cannot pass by it)."""
    assert table_fields("| `a`, `b` | int |\n| `c` | `x` or `y` |\n") == {"a", "b", "c"}
    assert paragraph_fields(
        "Thing: `a` (`x`, `y`), `b`, `c` (`{d, e}`). OtherView: `f`.\n", "Thing"
    ) == {"a", "b", "c"}
    assert brace_fields("200 `{a, b: [{c, d}], e (f, g), h}`", "200 ") == {"a", "b", "e", "h"}
    assert _disagreement({"a"}, {"properties": {"a": {}, "b": {}}}) != ""
