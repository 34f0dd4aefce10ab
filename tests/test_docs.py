"""Doc checks: docs/api.md lists every route the app serves (and no route it does not) and
every field of the job submit body; the README points at it, not at a file outside the
repository."""

from __future__ import annotations

import re
from pathlib import Path

from runplane.auth.rules import methods_of
from runplane.http.app import create_app
from runplane.jobs.spec import SubmitJobBody
from runplane.settings import load_settings

REPO = Path(__file__).resolve().parent.parent
API_DOC = REPO / "docs" / "api.md"
README = REPO / "README.md"
#: a route as docs/api.md writes it in a heading: "### METHOD /path"
HEADING = re.compile(r"^### (GET|POST|PUT|DELETE|PATCH|WEBSOCKET) (/\S*)$", re.MULTILINE)


def doc_path(rule: str) -> str:
    """A Quart rule as the docs write it: ``<job_id>`` and ``<anykey:key>`` as ``{...}``."""
    return re.sub(r"<(?:[^<>:]+:)?([^<>]+)>", r"{\1}", rule)


def served_routes(tmp_path: Path) -> set[str]:
    app = create_app(
        load_settings({"RUNPLANE_DATA_DIR": str(tmp_path / "data"), "RUNPLANE_LOCAL_AGENT": "0"})
    )
    return {
        f"{method} {doc_path(rule.rule)}"
        for rule in app.url_map.iter_rules()
        for method in methods_of(rule)
    }


def test_api_doc_lists_every_route_the_app_serves(tmp_path: Path) -> None:
    documented = {f"{m} {p}" for m, p in HEADING.findall(API_DOC.read_text())}
    served = served_routes(tmp_path)
    missing = sorted(served - documented)
    assert not missing, (
        f"routes missing from docs/api.md: {missing}; add a '### METHOD /path' section "
        "(method, path, auth from runplane/auth/rules.py, body or query, answer, errors)"
    )
    stale = sorted(documented - served)
    assert not stale, f"docs/api.md documents routes the app does not serve: {stale}"


def test_api_doc_lists_every_submit_body_field() -> None:
    text = API_DOC.read_text()
    section = text.split("### SubmitJobBody", 1)[1].split("\n### ", 1)[0]
    missing = [name for name in SubmitJobBody.model_fields if f"| `{name}` |" not in section]
    assert not missing, (
        f"SubmitJobBody fields missing from the table in docs/api.md: {missing} "
        "(name, type, default, meaning; runplane/jobs/spec.py)"
    )


def test_readme_links_the_api_reference_in_the_repository() -> None:
    text = README.read_text()
    assert "docs/api.md" in text
    assert "../shared" not in text  # not in a clone
    assert "../shared" not in API_DOC.read_text()


def _refusal_texts() -> list[str]:
    """The literal parts of every reason the server refuses an agent with (the reason
    argument of each ConnectRefused / EnrollmentRefused raised in runplane/nodes)."""
    import ast

    root = Path(__file__).resolve().parents[1] / "runplane" / "nodes"
    chunks: list[str] = []
    for name in ("connect.py", "enrollment.py"):
        tree = ast.parse((root / name).read_text())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id not in ("ConnectRefused", "EnrollmentRefused") or len(node.args) < 2:
                continue
            reason = node.args[1]
            parts = reason.values if isinstance(reason, ast.JoinedStr) else [reason]
            for part in parts:
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    chunks.append(part.value)
    return chunks


def test_agent_refusal_reasons_are_documented_word_for_word() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "agent.md").read_text()
    chunks = [c.strip() for c in _refusal_texts() if len(c.strip()) >= 8]
    assert len(chunks) >= 8
    missing = [c for c in chunks if c not in doc]
    assert not missing, f"refusal texts not in docs/agent.md: {missing}"


def test_mypy_allowlist_stays_empty() -> None:
    """docs/development.md: every runplane module is strict; no override switches a strict
    flag off (the allowlist only shrinks, and it is empty)."""
    import tomllib

    config = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    overrides = config["tool"]["mypy"]["overrides"]
    relaxed = [
        (o["module"], key)
        for o in overrides
        for key, value in o.items()
        if value is False or key == "implicit_reexport"
    ]
    assert not relaxed, f"mypy overrides that relax the strict set: {relaxed}"
    assert any(o["module"] == ["runplane.*"] and o.get("disallow_untyped_defs") for o in overrides)
