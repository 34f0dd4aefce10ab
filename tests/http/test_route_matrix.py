"""The route matrix: every registered route, called by every persona, in `required` mode.

Two guarantees:

1. ``test_every_route_has_a_rule``: each (method, URL rule) Quart registers is declared:
   its view carries ``@doc(..., rule=...)`` (runplane/http/openapi/route_doc.py). A new
   route without one fails here (and answers 500).
2. ``test_route_matrix``: each registered route is called as anonymous, a token of the wrong
   org, a token missing scopes, a viewer, a member, an org admin, the admin token and an
   owner's login session, and the status must be what the spec's tier for that route says
   (401 / 403 / 404 / 2xx). The tiers below are written from the spec, not read from the
   declarations, so the test checks the declared rules (and the handlers) against the spec. A new non-public route
   must get a case in CASES here.

Cross-org ids answer 404 with a body byte-identical to an unknown id's
(``test_cross_org_404_is_byte_identical``).
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from quart_trio import QuartTrio
from werkzeug.datastructures import FileStorage

from runplane import vault
from runplane.auth import identity, tokens
from runplane.auth.roles import SCOPES
from runplane.auth.rules import Rule
from runplane.http.app import create_app
from runplane.http.openapi.route_doc import declared_routes, rules_of
from runplane.images.credentials import RegistryCredentialBody
from runplane.nodes import enrollment, grants
from runplane.webhooks import endpoints
from tests.auth.support import (
    ADMIN_H,
    MANAGERS,
    PERSONA_SCOPES,
    PERSONAS,
    World,
    bearer,
    build_world,
    exchange,
    issue_login_token,
    login,
    store_of,
    unique,
)

DECLARATION = "@doc(..., rule=...) (runplane/http/openapi/route_doc.py)"
THIS_FILE = "tests/http/test_route_matrix.py"


def registered_routes(app: QuartTrio) -> list[tuple[str, str]]:
    """(method, rule) for every route the app serves (HEAD rides on GET, automatic OPTIONS
    is public, a WebSocket rule is method WEBSOCKET), from the routes' declarations."""
    return sorted({(d.method, d.rule) for d in declared_routes(app)})


@dataclass
class Req:
    path: str
    json: Any = None
    files: dict[str, FileStorage] | None = None
    data: bytes | None = None
    headers: dict[str, str] | None = None  # replaces the persona's headers when set


@dataclass
class Ctx:
    client: Any
    app: QuartTrio
    world: World
    persona: str


Prepare = Callable[[Ctx], Awaitable[Req]]


def path(p: str) -> Prepare:
    async def prepare(ctx: Ctx) -> Req:
        return Req(p.format(w=ctx.world))

    return prepare


MCP_PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


def body(p: str, make: Callable[[Ctx], Any]) -> Prepare:
    async def prepare(ctx: Ctx) -> Req:
        return Req(p.format(w=ctx.world), json=make(ctx))

    return prepare


@dataclass
class Case:
    tier: str  # public | read | scope | manage | org_manage | admin | operator | user_session
    prepare: Prepare
    ok: int = 200
    scope: str | None = None
    org_bound: bool = False  # names a resource of org A: the wrong org gets 404
    per_persona: dict[str, int] = field(default_factory=dict)  # public-route overrides
    check: Callable[[Ctx, Any], None] | None = None  # extra assertion on a 2xx body


def expected(case: Case, persona: str) -> int:
    tier, ok = case.tier, case.ok
    if tier == "public":
        return case.per_persona.get(persona, ok)
    if tier == "admin":
        return ok if persona == "admin" else 401
    if tier == "operator":
        return ok if persona == "admin" else 401 if persona == "anonymous" else 403
    if persona == "anonymous":
        return 401
    foreign = 404 if persona == "wrong_org" and case.org_bound else ok
    if tier == "read":
        return foreign
    if tier == "scope":
        held = PERSONA_SCOPES[persona]
        return foreign if ("*" in held or case.scope in held) else 403
    if tier == "manage":  # the wrong-org token is an owner (of org B): a manager
        return foreign if persona in MANAGERS | {"wrong_org"} else 403
    if tier == "org_manage":  # the route names org A
        return 404 if persona == "wrong_org" else ok if persona in MANAGERS else 403
    if tier == "user_session":
        return ok if persona == "session" else 403
    raise AssertionError(tier)


# --- preparations that need fresh state per call ------------------------------------------


async def _fresh_login_token(ctx: Ctx) -> Req:
    store = store_of(ctx.app)
    secret = await issue_login_token(store, ctx.world.owner_id, ctx.world.org_a)
    return Req("/v1/auth/token", json={"token": secret})


async def _logout(ctx: Ctx) -> Req:
    if ctx.persona != "session":
        return Req("/v1/auth/logout")
    # a throwaway session of the same user: the persona's own must survive the matrix
    store = store_of(ctx.app)
    throwaway = await login(ctx.client, store, ctx.world.owner_id, ctx.world.org_a)
    return Req("/v1/auth/logout", headers=bearer(throwaway))


async def _revoke_token(ctx: Ctx) -> Req:
    view, _ = await tokens.mint_token(store_of(ctx.app), subject="victim", org_id=ctx.world.org_a)
    return Req(f"/v1/auth/tokens/{view.id}")


async def _revoke_join_token(ctx: Ctx) -> Req:
    view, _ = await enrollment.mint_join_token(store_of(ctx.app), org_id=ctx.world.org_a)
    return Req(f"/v1/nodes/join-tokens/{view.id}")


async def _remove_member(ctx: Ctx) -> Req:
    added = await identity.add_member(
        store_of(ctx.app),
        ctx.world.org_a,
        name=None,
        email=unique("leaver") + "@example.com",
        role="member",
        granter=identity.SUPERUSER,
    )
    return Req(f"/v1/orgs/{ctx.world.org_a}/members/{added.user.id}")


def _zip_bytes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("main.py", "print('hi')\n")
    return buffer.getvalue()


async def _upload(ctx: Ctx) -> Req:
    file = FileStorage(io.BytesIO(_zip_bytes()), filename="code.zip", name="file")
    return Req("/v1/uploads", files={"file": file})


async def _put_artifact(ctx: Ctx) -> Req:
    return Req(f"/v1/artifacts/{ctx.world.job_a}/by-{ctx.persona}.txt", data=b"payload")


def _jobs_narrowed(ctx: Ctx, listed: Any) -> None:
    orgs = {job["org_id"] for job in listed}
    if ctx.persona == "wrong_org":
        assert orgs <= {ctx.world.org_b}, orgs
    elif ctx.persona not in ("admin",):
        assert orgs <= {ctx.world.org_a}, orgs


def _audit_narrowed(ctx: Ctx, rows: Any) -> None:
    orgs = {row["org_id"] for row in rows}
    if ctx.persona == "wrong_org":
        assert orgs <= {ctx.world.org_b}, orgs
    elif ctx.persona != "admin":
        assert orgs == {ctx.world.org_a}, orgs
    else:
        assert {ctx.world.org_a, ctx.world.org_b} <= orgs


def _runs_narrowed(ctx: Ctx, listed: Any) -> None:
    # a RunRow carries no org: org A's job is listed for org A's personas only
    assert all(set(row) >= {"job_id", "run_id", "has_runspec", "phase"} for row in listed)
    ids = {row["job_id"] for row in listed}
    assert (ctx.world.job_a in ids) == (ctx.persona != "wrong_org"), ctx.persona


def _own_policy(ctx: Ctx, view: Any) -> None:
    want = ctx.world.org_b if ctx.persona == "wrong_org" else ctx.world.org_a
    if ctx.persona != "admin":
        assert view["org_id"] == want, view["org_id"]


RUN_BODY = {"stack": "shell", "command": ["true"]}
PIPELINE_BODY = {"stages": [{"name": "only", "stack": "shell", "command": ["true"]}]}
PIPELINE = "/v1/pipelines/{w.pipeline_a}"
SESSION_BODY = {"pod": {"services": [{"name": "svc", "stack": "shell", "command": ["true"]}]}}
SESSION = "/v1/sessions/{w.session_a}"


async def _fresh_session(ctx: Ctx, suffix: str) -> Req:
    """A new session of org A for each call (a stopped one answers keepalive 409)."""
    made = await ctx.client.post(
        "/v1/sessions", json=SESSION_BODY, headers=ctx.world.headers("member")
    )
    assert made.status_code == 202, await made.get_data()
    return Req(f"/v1/sessions/{(await made.get_json())['id']}{suffix}")


async def _session_to_delete(ctx: Ctx) -> Req:
    return await _fresh_session(ctx, "")


async def _session_to_keep(ctx: Ctx) -> Req:
    return await _fresh_session(ctx, "/keepalive")


def _kept_or_not_found(ctx: Ctx, answer: Any) -> None:
    session = ctx.world.session_a
    if ctx.persona == "wrong_org":
        assert answer == {"sessions": [], "not_found": [session], "not_live": []}, answer
    else:
        assert [s["id"] for s in answer["sessions"]] == [session], answer


SCHEDULE_BODY = {"name": "hourly", "every": "1h", "job": {"stack": "shell", "command": ["true"]}}


async def _fresh_schedule(ctx: Ctx, patch: dict[str, Any] | None = None) -> Req:
    """A new schedule of org A for each call (DELETE removes it)."""
    made = await ctx.client.post(
        "/v1/schedules", json=SCHEDULE_BODY, headers=ctx.world.headers("member")
    )
    assert made.status_code == 201, await made.get_data()
    return Req(f"/v1/schedules/{(await made.get_json())['schedule_id']}", json=patch)


async def _schedule(ctx: Ctx) -> Req:
    return await _fresh_schedule(ctx)


async def _schedule_patch(ctx: Ctx) -> Req:
    return await _fresh_schedule(ctx, {"suspend": True})


async def _ended_pipeline(ctx: Ctx) -> Req:
    """A new pipeline of org A, cancelled (over, its stage job cancelled): retryable."""
    headers = ctx.world.headers("member")
    made = await ctx.client.post("/v1/pipelines", json=PIPELINE_BODY, headers=headers)
    assert made.status_code == 202, await made.get_data()
    run_id = (await made.get_json())["pipeline_run_id"]
    cancelled = await ctx.client.post(f"/v1/pipelines/{run_id}/cancel", headers=headers)
    assert cancelled.status_code == 200, await cancelled.get_data()
    return Req(f"/v1/pipelines/{run_id}/retry")


async def _node_of_org_a(ctx: Ctx) -> Req:
    """A node row owned by org A (as enrollment with org A's join token writes it)."""
    node_id = f"node_{ctx.world.org_a}"
    await store_of(ctx.app).execute(
        "INSERT INTO nodes (id, org_id, name, tier, facts, agent_version, channel, status,"
        " created_at, updated_at) VALUES (?, ?, 'box', 'community', '{\"cpu_cores\": 8}',"
        " '1', 'stable', 'offline', 0, 0) ON CONFLICT (id) DO NOTHING",
        (node_id, ctx.world.org_a),
    )
    return Req(f"/v1/nodes/{node_id}", json={"name": f"by-{ctx.persona}", "cpu_cap": 4})


async def _node_metrics(ctx: Ctx) -> Req:
    made = await _node_of_org_a(ctx)
    return Req(made.path + "/metrics?window=15m")


async def _node_update(ctx: Ctx) -> Req:
    made = await _node_of_org_a(ctx)
    return Req(made.path + "/update")


#: Where the matrix's webhooks point: a loopback port nothing listens on (allowed by the
#: fixture's RUNPLANE_EGRESS_ALLOW), so no delivery leaves the machine.
HOOK_URL = "http://127.0.0.1:9/hook"


def _webhook_body(ctx: Ctx) -> dict[str, Any]:
    # the admin token names the org (400 otherwise); a manager creates in its own
    return {"url": HOOK_URL, **({"org_id": ctx.world.org_a} if ctx.persona == "admin" else {})}


async def _webhook_to_delete(ctx: Ctx) -> Req:
    """A fresh endpoint of org A (a delete consumes it)."""
    root = ctx.app.extensions["runplane"].root
    endpoint, _ = endpoints.new_endpoint(
        root.webhooks.sealer(),
        org_id=ctx.world.org_a,
        url=HOOK_URL,
        events=endpoints.EVENTS,
        created_by="setup",
    )
    await endpoints.insert(store_of(ctx.app), endpoint)
    return Req(f"/v1/webhooks/{endpoint.id}")


async def _new_secret(ctx: Ctx) -> Req:
    """A secret name of its own per persona (a second PUT of one answers 200, not 201)."""
    org = f"?org={ctx.world.org_a}" if ctx.persona == "admin" else ""
    return Req(f"/v1/secrets/MATRIX_{ctx.persona.upper()}{org}", json={"value": "s3cret-value"})


async def _secret_to_delete(ctx: Ctx) -> Req:
    """A secret of org A (a delete consumes it)."""
    root = ctx.app.extensions["runplane"].root
    await vault.put(store_of(ctx.app), root.sealer(), ctx.world.org_a, "GONE", "v4lue", "setup")
    org = f"?org={ctx.world.org_a}" if ctx.persona == "admin" else ""
    return Req(f"/v1/secrets/GONE{org}")


async def _new_registry_credential(ctx: Ctx) -> Req:
    """A credential for a registry of its own per persona (a second one is a 409)."""
    org = f"?org={ctx.world.org_a}" if ctx.persona == "admin" else ""
    body = {
        "registry": f"{ctx.persona.replace('_', '-')}.matrix.example:5000",
        "username": "u",
        "password": "pw",
    }
    return Req(f"/v1/registries{org}", json=body)


async def _registry_credential_to_delete(ctx: Ctx) -> Req:
    """A registry credential of org A (a delete consumes it)."""
    root = ctx.app.extensions["runplane"].root
    body = RegistryCredentialBody(registry=unique("gone.example"), username="u", password="pw")
    made = await root.images.create_credential(body, org_id=ctx.world.org_a, created_by="setup")
    return Req(f"/v1/registries/{made.id}")


async def _grant_to_revoke(ctx: Ctx) -> Req:
    made = await grants.create(
        store_of(ctx.app),
        grants.GrantBody(grantee_org="org_partner"),
        caller_org=ctx.world.org_a,
        superuser=False,
        created_by="setup",
    )
    return Req(f"/v1/nodes/grants/{made.id}")


def _grants_narrowed(ctx: Ctx, body: Any) -> None:
    assert set(body) == {"issued", "received"}
    owners = {g["owner_org"] for g in body["issued"]}
    if ctx.persona == "wrong_org":
        assert owners <= {ctx.world.org_b}, owners
    elif ctx.persona != "admin":
        assert owners <= {ctx.world.org_a}, owners


def _analytics_narrowed(ctx: Ctx, body: Any) -> None:
    # org A has jobs (job_a, the pipeline's, the session's); org B none yet
    submitted = body["summary"]["submitted"]
    assert (submitted == 0) == (ctx.persona == "wrong_org"), (ctx.persona, submitted)


def _shares_narrowed(ctx: Ctx, body: Any) -> None:
    orgs = {row["org_id"] for row in body["orgs"]}
    if ctx.persona == "wrong_org":
        assert orgs == {ctx.world.org_b}, orgs
    elif ctx.persona != "admin":
        assert orgs == {ctx.world.org_a}, orgs
    else:  # org A has jobs waiting or running (job_a, the pipeline's, the session's)
        assert ctx.world.org_a in orgs, orgs


def _sessions_narrowed(ctx: Ctx, listed: Any) -> None:
    orgs = {row["org_id"] for row in listed}
    if ctx.persona == "wrong_org":
        assert orgs <= {ctx.world.org_b}, orgs
    elif ctx.persona != "admin":
        assert orgs <= {ctx.world.org_a}, orgs
    ids = {row["id"] for row in listed}
    assert (ctx.world.session_a in ids) == (ctx.persona != "wrong_org"), ctx.persona


def _pipelines_narrowed(ctx: Ctx, listed: Any) -> None:
    orgs = {run["org_id"] for run in listed}
    if ctx.persona == "wrong_org":
        assert orgs <= {ctx.world.org_b}, orgs
    elif ctx.persona != "admin":
        assert orgs <= {ctx.world.org_a}, orgs
    ids = {run["pipeline_run_id"] for run in listed}
    assert (ctx.world.pipeline_a in ids) == (ctx.persona != "wrong_org"), ctx.persona


JOB = "/v1/jobs/{w.job_a}"
ARRAY = "/v1/arrays/{w.array_a}"


def _with_stream(p: str, *, post: Any = None) -> Prepare:
    """``p`` on job_a once it has a stream ``telemetry`` (as if its job had written one)."""

    async def prepare(ctx: Ctx) -> Req:
        streams = '{"telemetry": {"kind": "telemetry", "count": 0, "last_seq": 0}}'
        await store_of(ctx.app).execute(
            "UPDATE jobs SET streams = ? WHERE id = ?", (streams, ctx.world.job_a)
        )
        return Req(p.format(w=ctx.world), json=post)

    return prepare


MEMBERS = "/v1/orgs/{w.org_a}/members"

CASES: dict[tuple[str, str], Case] = {
    # public
    ("GET", "/healthz"): Case("public", path("/healthz")),
    ("GET", "/v1/healthz"): Case("public", path("/v1/healthz")),
    ("GET", "/readyz"): Case("public", path("/readyz")),
    ("GET", "/v1/readyz"): Case("public", path("/v1/readyz")),
    ("GET", "/v1/ha"): Case("public", path("/v1/ha")),
    ("GET", "/openapi.json"): Case("public", path("/openapi.json")),
    ("GET", "/v1/openapi.json"): Case("public", path("/v1/openapi.json")),
    # the MCP facade: a read to reach it; each tool call is then decided by its route
    ("POST", "/mcp"): Case("read", body("/mcp", lambda c: MCP_PING)),
    ("POST", "/v1/mcp"): Case("read", body("/v1/mcp", lambda c: MCP_PING)),
    # public rule; with auth required the route takes only the admin (or metrics) token
    ("GET", "/metrics"): Case(
        "public",
        path("/metrics"),
        per_persona={p: 401 for p in PERSONAS if p != "admin"},
    ),
    ("GET", "/static/<path:filename>"): Case("public", path("/static/app.css")),
    ("GET", "/"): Case("public", path("/")),
    ("GET", "/jobs/<job_id>"): Case("public", path("/jobs/job_x?share=rpsh_x")),
    ("GET", "/embed"): Case("public", path("/embed?e=rpem_x&j=job_x")),
    ("GET", "/submit"): Case("public", path("/submit")),
    ("GET", "/nodes"): Case("public", path("/nodes")),
    ("GET", "/pipelines"): Case("public", path("/pipelines")),
    ("GET", "/sessions"): Case("public", path("/sessions")),
    ("GET", "/pipelines/<run_id>"): Case("public", path("/pipelines/plr_x")),
    ("GET", "/arrays/<array_id>"): Case("public", path("/arrays/arr_x")),
    ("GET", "/v1/auth/whoami"): Case("public", path("/v1/auth/whoami")),
    ("GET", "/v1/roles"): Case("public", path("/v1/roles")),
    ("POST", "/v1/auth/token"): Case("public", _fresh_login_token),
    ("POST", "/v1/auth/logout"): Case("public", _logout, ok=204),
    ("POST", "/v1/uploads"): Case("public", _upload),
    ("PUT", "/v1/artifacts/<anykey:key>"): Case("public", _put_artifact, ok=201),
    ("GET", "/v1/artifacts/<anykey:key>"): Case(
        "public", path(JOB.replace("jobs", "artifacts") + "/out.txt")
    ),
    ("GET", "/v1/artifacts-zip/<anykey:prefix>"): Case(
        "public",
        path("/v1/artifacts-zip/{w.job_a}"),
        # public, but guarded by org ownership: an anonymous caller of a `required` deploy
        # reads no org, another org's token gets the unknown-prefix 404
        per_persona={"anonymous": 404, "wrong_org": 404},
    ),
    # operator (admin token)
    ("GET", "/v1/admin/channel-target"): Case("admin", path("/v1/admin/channel-target")),
    ("POST", "/v1/admin/channel-target"): Case(
        "admin", body("/v1/admin/channel-target", lambda c: {"channel": "edge", "version": "9"})
    ),
    ("POST", "/v1/nodes/join-tokens"): Case(
        "admin", body("/v1/nodes/join-tokens", lambda c: {"org_id": c.world.org_a}), ok=201
    ),
    ("GET", "/v1/nodes/join-tokens"): Case("admin", path("/v1/nodes/join-tokens")),
    ("DELETE", "/v1/nodes/join-tokens/<token_id>"): Case("admin", _revoke_join_token),
    ("POST", "/v1/auth/tokens"): Case(
        "admin", body("/v1/auth/tokens", lambda c: {"subject": "new", "role": "viewer"}), ok=201
    ),
    ("GET", "/v1/auth/tokens"): Case("admin", path("/v1/auth/tokens")),
    ("DELETE", "/v1/auth/tokens/<token_id>"): Case("admin", _revoke_token),
    ("POST", "/v1/auth/seat"): Case(
        "operator",
        body("/v1/auth/seat", lambda c: {"email": unique("seat") + "@example.com"}),
        ok=201,
    ),
    # manage
    ("GET", "/v1/admin/audit"): Case("manage", path("/v1/admin/audit"), check=_audit_narrowed),
    ("GET", "/v1/orgs/<org_id>/members"): Case("org_manage", path(MEMBERS)),
    ("POST", "/v1/orgs/<org_id>/members"): Case(
        "org_manage",
        body(MEMBERS, lambda c: {"email": unique("new") + "@example.com", "role": "viewer"}),
        ok=201,
    ),
    ("DELETE", "/v1/orgs/<org_id>/members/<user_id>"): Case("org_manage", _remove_member, ok=204),
    # user session
    ("POST", "/v1/orgs"): Case(
        "user_session", body("/v1/orgs", lambda c: {"name": unique("Team ")}), ok=201
    ),
    ("GET", "/v1/orgs"): Case("user_session", path("/v1/orgs")),
    # reads
    ("GET", "/v1/stacks"): Case("read", path("/v1/stacks")),
    ("GET", "/v1/stacks/<name>"): Case("read", path("/v1/stacks/shell")),
    ("GET", "/v1/jobs"): Case("read", path("/v1/jobs"), check=_jobs_narrowed),
    ("GET", "/v1/jobs/<job_id>"): Case("read", path(JOB), org_bound=True),
    ("GET", "/v1/jobs/<job_id>/logs"): Case("read", path(JOB + "/logs"), org_bound=True),
    ("GET", "/v1/jobs/<job_id>/artifacts"): Case("read", path(JOB + "/artifacts"), org_bound=True),
    ("GET", "/v1/jobs/<job_id>/events"): Case("read", path(JOB + "/events"), org_bound=True),
    # streams: job_a (finished) has a stream "telemetry" (_with_stream); its data replays
    # what was stored and ends
    ("GET", "/v1/jobs/<job_id>/streams"): Case("read", path(JOB + "/streams"), org_bound=True),
    ("POST", "/v1/jobs/<job_id>/streams/<name>/subscribe"): Case(
        "read", _with_stream(JOB + "/streams/telemetry/subscribe", post={}), org_bound=True
    ),
    ("GET", "/v1/jobs/<job_id>/streams/<name>/data"): Case(
        "read", _with_stream(JOB + "/streams/telemetry/data"), org_bound=True
    ),
    # without a stream ticket nobody may send teleop, the admin token included
    ("POST", "/v1/jobs/<job_id>/streams/<name>/teleop"): Case(
        "public", _with_stream(JOB + "/streams/telemetry/teleop", post={"push": 1}), ok=401
    ),
    ("GET", "/v1/jobs/<job_id>/recording"): Case("read", path(JOB + "/recording"), org_bound=True),
    # share links and embed grants (docs/sharing.md)
    ("POST", "/v1/jobs/<job_id>/share"): Case(
        "scope", path(JOB + "/share"), ok=201, scope="runs:share", org_bound=True
    ),
    ("DELETE", "/v1/jobs/<job_id>/share"): Case(
        "scope", path(JOB + "/share"), scope="runs:share", org_bound=True
    ),
    ("GET", "/s/<code>"): Case("public", path("/s/rpsh_unknown"), ok=302),
    # any of runs:manage, runs:share, runs:submit (the roles that hold one hold runs:share)
    ("POST", "/v1/jobs/<job_id>/embed"): Case(
        "scope", path(JOB + "/embed"), ok=201, scope="runs:share", org_bound=True
    ),
    ("GET", "/v1/embed/grant"): Case("public", path("/v1/embed/grant"), ok=401),
    ("GET", "/embed/e/<token>"): Case("public", path("/embed/e/rpem_unknown"), ok=302),
    ("GET", "/v1/nodes"): Case("read", path("/v1/nodes")),
    ("GET", "/v1/nodes/grants"): Case("read", path("/v1/nodes/grants"), check=_grants_narrowed),
    ("GET", "/v1/runs"): Case("read", path("/v1/runs"), check=_runs_narrowed),
    ("GET", "/v1/runs/<run_id>"): Case("read", path("/v1/runs/{w.job_a}"), org_bound=True),
    ("GET", "/v1/me/entitlements"): Case("read", path("/v1/me/entitlements")),
    ("GET", "/v1/analytics/jobs"): Case(
        "read", path("/v1/analytics/jobs"), check=_analytics_narrowed
    ),
    ("GET", "/v1/analytics/share"): Case(
        "read", path("/v1/analytics/share"), check=_shares_narrowed
    ),
    ("GET", "/v1/pipelines"): Case("read", path("/v1/pipelines"), check=_pipelines_narrowed),
    ("GET", "/v1/pipelines/<run_id>"): Case("read", path(PIPELINE), org_bound=True),
    ("GET", "/v1/sessions"): Case("read", path("/v1/sessions"), check=_sessions_narrowed),
    ("GET", "/v1/sessions/<session_id>"): Case("read", path(SESSION), org_bound=True),
    # always 501 once the session is visible (404 for another org's)
    ("POST", "/v1/sessions/<session_id>/signal"): Case(
        "read", path(SESSION + "/signal"), ok=501, org_bound=True
    ),
    # manage: policy
    ("GET", "/v1/policy"): Case("manage", path("/v1/policy"), check=_own_policy),
    ("PUT", "/v1/policy"): Case(
        "manage", body("/v1/policy", lambda c: {"org": {"max_cpu": 64}}), check=_own_policy
    ),
    ("GET", "/v1/policy/preview"): Case("manage", path("/v1/policy/preview?stack=shell")),
    ("POST", "/v1/policy/preview"): Case(
        "manage", body("/v1/policy/preview", lambda c: {"stack": "shell", "project": "p"})
    ),
    # scopes
    ("POST", "/v1/jobs"): Case(
        "scope",
        body("/v1/jobs", lambda c: {"stack": "shell", "command": ["true"]}),
        ok=202,
        scope="runs:submit",
    ),
    ("POST", "/v1/runs"): Case(
        "scope", body("/v1/runs", lambda c: RUN_BODY), ok=202, scope="runs:submit"
    ),
    ("POST", "/v1/jobs/batch"): Case(
        "scope",
        body("/v1/jobs/batch", lambda c: {"jobs": [{"stack": "shell", "command": ["true"]}]}),
        ok=202,
        scope="runs:submit",
    ),
    ("GET", "/v1/arrays/<array_id>"): Case("read", path(ARRAY), org_bound=True),
    ("POST", "/v1/arrays/<array_id>/cancel"): Case(
        "scope", path(ARRAY + "/cancel"), scope="runs:cancel", org_bound=True
    ),
    ("POST", "/v1/pipelines"): Case(
        "scope", body("/v1/pipelines", lambda c: PIPELINE_BODY), ok=202, scope="runs:submit"
    ),
    ("POST", "/v1/pipelines/validate"): Case(
        "scope", body("/v1/pipelines/validate", lambda c: PIPELINE_BODY), scope="runs:submit"
    ),
    ("PATCH", "/v1/nodes/<node_id>"): Case("manage", _node_of_org_a, org_bound=True),
    # a connection to a repository that does not resolve: created degraded (no network)
    ("POST", "/v1/git/connections"): Case(
        "scope",
        body(
            "/v1/git/connections",
            lambda c: {
                "provider": "gitea",
                "base_url": "http://git.invalid",
                "repo_url": "http://git.invalid/o/r.git",
                "secret": "pat-for-the-matrix",
            },
        ),
        ok=201,
        scope="git:connect",
    ),
    ("GET", "/v1/git/connections"): Case("scope", path("/v1/git/connections"), scope="git:read"),
    # the git proxy takes an attempt's fetch ticket only: every persona without one is 401
    ("GET", "/v1/git/proxy/<connection_id>/info/refs"): Case(
        "public", path("/v1/git/proxy/gc_x/info/refs?service=git-upload-pack"), ok=401
    ),
    ("POST", "/v1/git/proxy/<connection_id>/git-upload-pack"): Case(
        "public", path("/v1/git/proxy/gc_x/git-upload-pack"), ok=401
    ),
    ("PUT", "/v1/secrets/<name>"): Case("manage", _new_secret, ok=201),
    ("GET", "/v1/secrets"): Case("manage", path("/v1/secrets")),
    ("DELETE", "/v1/secrets/<name>"): Case("manage", _secret_to_delete, ok=204, org_bound=True),
    ("POST", "/v1/registries"): Case("manage", _new_registry_credential, ok=201),
    ("GET", "/v1/registries"): Case("manage", path("/v1/registries")),
    ("DELETE", "/v1/registries/<credential_id>"): Case(
        "manage", _registry_credential_to_delete, ok=204, org_bound=True
    ),
    ("POST", "/v1/webhooks"): Case("manage", body("/v1/webhooks", _webhook_body), ok=201),
    ("GET", "/v1/webhooks"): Case("manage", path("/v1/webhooks")),
    ("DELETE", "/v1/webhooks/<webhook_id>"): Case("manage", _webhook_to_delete, org_bound=True),
    ("POST", "/v1/webhooks/<webhook_id>/test"): Case(
        "manage", path("/v1/webhooks/{w.webhook_a}/test"), ok=202, org_bound=True
    ),
    ("GET", "/v1/webhooks/<webhook_id>/deliveries"): Case(
        "manage", path("/v1/webhooks/{w.webhook_a}/deliveries"), org_bound=True
    ),
    # nodes are a shared fleet: every reader sees every node's load
    ("GET", "/v1/nodes/<node_id>/metrics"): Case("read", _node_metrics),
    # self-update: the operator's (an offline node: 202, it takes the target when back); a
    # known caller who is not the operator is 403 (spec)
    ("POST", "/v1/nodes/<node_id>/update"): Case("operator", _node_update, ok=202),
    ("POST", "/v1/nodes/grants"): Case(
        "scope",
        body(
            "/v1/nodes/grants",
            lambda c: {"owner_org": c.world.org_a, "grantee_org": "org_partner"},
        ),
        ok=201,
        scope="nodes:grant",
        org_bound=True,
    ),
    ("DELETE", "/v1/nodes/grants/<grant_id>"): Case(
        "scope", _grant_to_revoke, ok=204, scope="nodes:grant", org_bound=True
    ),
    ("POST", "/v1/sessions"): Case(
        "scope", body("/v1/sessions", lambda c: SESSION_BODY), ok=202, scope="runs:submit"
    ),
    ("DELETE", "/v1/sessions/<session_id>"): Case(
        "scope", _session_to_delete, scope="runs:cancel", org_bound=True
    ),
    ("POST", "/v1/sessions/<session_id>/keepalive"): Case(
        "scope", _session_to_keep, scope="runs:submit", org_bound=True
    ),
    # org A's session: kept for A's callers, not_found for the wrong org's (200 either way)
    ("POST", "/v1/sessions/keepalive"): Case(
        "scope",
        body("/v1/sessions/keepalive", lambda c: {"ids": [c.world.session_a]}),
        scope="runs:submit",
        check=_kept_or_not_found,
    ),
    ("POST", "/v1/pipelines/<run_id>/cancel"): Case(
        "scope", path(PIPELINE + "/cancel"), scope="runs:cancel", org_bound=True
    ),
    ("POST", "/v1/schedules"): Case(
        "scope", body("/v1/schedules", lambda c: SCHEDULE_BODY), ok=201, scope="runs:submit"
    ),
    ("GET", "/v1/schedules"): Case("read", path("/v1/schedules")),
    ("GET", "/v1/schedules/<schedule_id>"): Case("read", _schedule, org_bound=True),
    ("PATCH", "/v1/schedules/<schedule_id>"): Case(
        "scope", _schedule_patch, scope="runs:submit", org_bound=True
    ),
    ("DELETE", "/v1/schedules/<schedule_id>"): Case(
        "scope", _schedule, scope="runs:submit", org_bound=True
    ),
    ("POST", "/v1/pipelines/<run_id>/retry"): Case(
        "scope", _ended_pipeline, scope="runs:submit", org_bound=True
    ),
    ("POST", "/v1/runs/validate"): Case(
        "scope", body("/v1/runs/validate", lambda c: RUN_BODY), scope="runs:submit"
    ),
    ("POST", "/v1/runs/resolve"): Case(
        "scope", body("/v1/runs/resolve", lambda c: RUN_BODY), scope="runs:submit"
    ),
    ("GET", "/v1/policy/preflight"): Case(
        "scope", path("/v1/policy/preflight?stack=shell&cpu_cores=2"), scope="runs:submit"
    ),
    ("POST", "/v1/policy/preflight"): Case(
        "scope",
        body("/v1/policy/preflight", lambda c: {"stack": "shell", "limits": {"cpu_cores": 2}}),
        scope="runs:submit",
    ),
    ("POST", "/v1/jobs/<job_id>/cancel"): Case(
        "scope", path(JOB + "/cancel"), scope="runs:cancel", org_bound=True
    ),
    ("POST", "/v1/jobs/<job_id>/priority"): Case(
        "scope",
        body(JOB + "/priority", lambda c: {"priority": 5}),
        scope="runs:priority",
        org_bound=True,
    ),
    ("POST", "/v1/jobs/<job_id>/rerun"): Case(
        "scope", path(JOB + "/rerun"), ok=202, scope="runs:submit", org_bound=True
    ),
}

#: WebSocket routes authenticate in their handler; the auth layer must let every persona
#: reach it (the handler then closes a bad hello with 4400).
WEBSOCKETS = {("WEBSOCKET", "/v1/nodes/connect")}


@pytest.fixture
async def served(make_settings: Callable[..., Any]) -> Any:
    # rate limits off: the matrix sends many requests per persona (tests/http/test_rate_limits.py)
    app = create_app(
        make_settings(
            auth="required", egress_allow="127.0.0.1", rate_limit="off", rate_limit_address="off"
        )
    )
    async with app.test_app():
        client = app.test_client()
        world = await build_world(client, store_of(app))
        hook = await client.post(
            "/v1/webhooks", json={"url": HOOK_URL, "org_id": world.org_a}, headers=ADMIN_H
        )
        assert hook.status_code == 201, await hook.get_data()
        world.webhook_a = (await hook.get_json())["id"]
        response = await client.put(f"/v1/artifacts/{world.job_a}/out.txt", data=b"artifact")
        assert response.status_code == 201, await response.get_data()
        pipeline = await client.post(
            "/v1/pipelines", json=PIPELINE_BODY, headers=world.headers("member")
        )
        assert pipeline.status_code == 202, await pipeline.get_data()
        world.pipeline_a = (await pipeline.get_json())["pipeline_run_id"]
        session = await client.post(
            "/v1/sessions", json=SESSION_BODY, headers=world.headers("member")
        )
        assert session.status_code == 202, await session.get_data()
        world.session_a = (await session.get_json())["id"]
        array = await client.post(
            "/v1/jobs/batch",
            json={"job": {"stack": "sim-cartpole"}, "sweep": {"episodes": [1, 2]}},
            headers=world.headers("member"),
        )
        assert array.status_code == 202, await array.get_data()
        world.array_a = (await array.get_json())["array_id"]
        yield app, client, world


async def test_every_route_has_a_rule(make_settings: Callable[..., Any]) -> None:
    app = create_app(make_settings())
    missing = [f"{d.method} {d.rule}" for d in declared_routes(app) if d.route is None]
    assert not missing, (
        f"routes without a declaration: {missing}. Give each view {DECLARATION} "
        "(public | read | scope | manage | org_manage | admin | operator | user_session), "
        f"and a case for it in CASES in {THIS_FILE}."
    )


async def test_declared_rules_shape(make_settings: Callable[..., Any]) -> None:
    rules = rules_of(create_app(make_settings()))
    for (method, route), rule in rules.items():
        assert method in {"GET", "POST", "PUT", "PATCH", "DELETE", "WEBSOCKET"}, method
        assert route.startswith("/"), route
        if rule.need == "scope":
            assert rule.scope in SCOPES
    # ?token= is accepted on exactly one route (spec point 7)
    assert [k for k, r in rules.items() if r.query_token] == [("GET", "/v1/jobs/<job_id>/events")]
    assert rules[("WEBSOCKET", "/v1/nodes/connect")] == Rule("public", reads_credential=True)
    assert rules[("GET", "/static/<path:filename>")] == Rule("public")


async def test_an_undeclared_route_answers_500(make_settings: Callable[..., Any]) -> None:
    """A route without a declaration is refused loudly, never let through."""
    app = create_app(make_settings(auth="off"))

    @app.get("/v1/undeclared")
    async def undeclared() -> str:
        return "reached"

    async with app.test_app():
        response = await app.test_client().get("/v1/undeclared")
        assert response.status_code == 500
        body = await response.get_json()
        assert body["code"] == "undeclared_route"
        assert "GET /v1/undeclared" in body["detail"] and "rule=" in body["detail"]


async def test_route_matrix(served: Any) -> None:
    app, client, world = served
    routes = registered_routes(app)
    uncovered = [f"{m} {r}" for m, r in routes if (m, r) not in CASES and (m, r) not in WEBSOCKETS]
    assert not uncovered, (
        f"routes the matrix does not cover: {uncovered}. Add a Case to CASES in {THIS_FILE} "
        f"with the spec's tier for it (and declare its rule: {DECLARATION})."
    )
    failures = []
    calls = 0
    for method, rule in routes:
        if (method, rule) in WEBSOCKETS:
            continue
        case = CASES[(method, rule)]
        for persona in PERSONAS:
            ctx = Ctx(client, app, world, persona)
            req = await case.prepare(ctx)
            headers = req.headers if req.headers is not None else world.headers(persona)
            kwargs: dict[str, Any] = {"method": method, "headers": headers}
            if req.json is not None:
                kwargs["json"] = req.json
            if req.files is not None:
                kwargs["files"] = req.files
            if req.data is not None:
                kwargs["data"] = req.data
            response = await client.open(req.path, **kwargs)
            calls += 1
            want = expected(case, persona)
            if response.status_code != want:
                text = (await response.get_data(as_text=True))[:200]
                failures.append(
                    f"{method} {rule} as {persona}: {response.status_code}, want {want}: {text}"
                )
            elif case.check is not None and 200 <= want < 300:
                case.check(ctx, await response.get_json())
    assert not failures, "\n".join(failures)
    covered = len(routes)
    assert covered == len(CASES) + len(WEBSOCKETS), (covered, len(CASES))
    assert calls == (covered - len(WEBSOCKETS)) * len(PERSONAS)


async def test_websocket_routes_reach_their_handler(served: Any) -> None:
    from quart.testing.connections import WebsocketDisconnectError

    _, client, world = served
    for _, rule in sorted(WEBSOCKETS):
        for persona in PERSONAS:
            async with client.websocket(rule, headers=world.headers(persona)) as ws:
                await ws.send("not a hello")
                with pytest.raises(WebsocketDisconnectError) as closed:
                    await ws.receive()
            assert closed.value.args[0] == 4400, (persona, closed.value.args)


@pytest.mark.parametrize(
    ("persona", "foreign", "unknown"),
    [
        ("wrong_org", "/v1/jobs/{w.job_a}", "/v1/jobs/job_01aaaaaaaaaaaaaaaaaaaaaaaa"),
        ("wrong_org", "/v1/jobs/{w.job_a}/logs", "/v1/jobs/job_nope/logs"),
        ("wrong_org", "/v1/jobs/{w.job_a}/artifacts", "/v1/jobs/job_nope/artifacts"),
        ("wrong_org", "/v1/jobs/{w.job_a}/events", "/v1/jobs/job_nope/events"),
        ("wrong_org", "/v1/jobs/{w.job_a}/streams", "/v1/jobs/job_nope/streams"),
        ("wrong_org", "/v1/jobs/{w.job_a}/recording", "/v1/jobs/job_nope/recording"),
        (
            "wrong_org",
            "POST /v1/jobs/{w.job_a}/streams/telemetry/subscribe",
            "POST /v1/jobs/job_nope/streams/telemetry/subscribe",
        ),
        ("wrong_org", "/v1/runs/{w.job_a}", "/v1/runs/job_nope"),
        ("wrong_org", "/v1/pipelines/{w.pipeline_a}", "/v1/pipelines/plr_nope"),
        ("wrong_org", "/v1/sessions/{w.session_a}", "/v1/sessions/ses_nope"),
        ("wrong_org", "/v1/arrays/{w.array_a}", "/v1/arrays/arr_nope"),
        ("wrong_org", "POST /v1/arrays/{w.array_a}/cancel", "POST /v1/arrays/arr_nope/cancel"),
        ("wrong_org", "/v1/webhooks/{w.webhook_a}/deliveries", "/v1/webhooks/wh_nope/deliveries"),
        ("wrong_org", "DELETE /v1/webhooks/{w.webhook_a}", "DELETE /v1/webhooks/wh_nope"),
        ("wrong_org", "POST /v1/webhooks/{w.webhook_a}/test", "POST /v1/webhooks/wh_nope/test"),
        ("wrong_org", "DELETE /v1/sessions/{w.session_a}", "DELETE /v1/sessions/ses_nope"),
        (
            "wrong_org",
            "POST /v1/sessions/{w.session_a}/keepalive",
            "POST /v1/sessions/ses_nope/keepalive",
        ),
        (
            "wrong_org",
            "POST /v1/sessions/{w.session_a}/signal",
            "POST /v1/sessions/ses_nope/signal",
        ),
        (
            "wrong_org",
            "POST /v1/pipelines/{w.pipeline_a}/cancel",
            "POST /v1/pipelines/plr_nope/cancel",
        ),
        (
            "wrong_org",
            "POST /v1/pipelines/{w.pipeline_a}/retry",
            "POST /v1/pipelines/plr_nope/retry",
        ),
        ("org_admin", "/v1/policy?org={w.org_b}", "/v1/policy?org=org_nope"),
        ("wrong_org", "/v1/policy/preview?org={w.org_a}", "/v1/policy/preview?org=org_nope"),
        ("wrong_org", "POST /v1/jobs/{w.job_a}/cancel", "POST /v1/jobs/job_nope/cancel"),
        ("wrong_org", "POST /v1/jobs/{w.job_a}/rerun", "POST /v1/jobs/job_nope/rerun"),
        ("wrong_org", "/v1/orgs/{w.org_a}/members", "/v1/orgs/org_nope/members"),
        ("org_admin", "/v1/orgs/{w.org_b}/members", "/v1/orgs/org_nope/members"),
        ("viewer", "/v1/orgs/{w.org_b}/members", "/v1/orgs/org_nope/members"),
        (
            "wrong_org",
            "DELETE /v1/orgs/{w.org_a}/members/{w.owner_id}",
            "DELETE /v1/orgs/org_nope/members/usr_x",
        ),
    ],
)
async def test_cross_org_404_is_byte_identical(
    served: Any, persona: str, foreign: str, unknown: str
) -> None:
    _, client, world = served
    bodies = []
    for target in (foreign, unknown):
        method, _, url = target.rpartition(" ")
        response = await client.open(
            url.format(w=world),
            method=method or "GET",
            headers={**world.headers(persona), "X-Request-ID": "req_same"},
        )
        assert response.status_code == 404
        bodies.append(await response.get_data())
    assert bodies[0] == bodies[1]


async def test_query_token_only_on_job_events(served: Any) -> None:
    _, client, world = served
    token = world.secrets["member"]
    events = await client.get(f"/v1/jobs/{world.job_a}/events?token={token}")
    assert events.status_code == 200
    assert "event: phase" in await events.get_data(as_text=True)
    for url in (f"/v1/jobs/{world.job_a}?token={token}", f"/v1/jobs?token={token}"):
        assert (await client.get(url)).status_code == 401, url
    # a revoked token is refused there too
    view = await (await client.get("/v1/auth/tokens", headers=ADMIN_H)).get_json()
    member_id = next(t["id"] for t in view if t["subject"] == "mo")
    await client.delete(f"/v1/auth/tokens/{member_id}", headers=ADMIN_H)
    assert (await client.get(f"/v1/jobs/{world.job_a}/events?token={token}")).status_code == 401


async def test_session_acts_in_another_org_of_its_user(served: Any) -> None:
    _, client, world = served
    # the owner's session lives in org A; X-Runplane-Org moves it to org B, where it is owner
    headers = {**world.headers("session"), "X-Runplane-Org": world.org_b}
    me = await (await client.get("/v1/auth/whoami", headers=headers)).get_json()
    assert (me["org_id"], me["role"]) == (world.org_b, "owner")
    job = await (await client.post("/v1/jobs", json={"stack": "shell"}, headers=headers)).get_json()
    assert job["org_id"] == world.org_b
    assert (await client.get(f"/v1/jobs/{world.job_a}", headers=headers)).status_code == 404
    stranger = {**world.headers("session"), "X-Runplane-Org": "org_elsewhere"}
    response = await client.get("/v1/jobs", headers=stranger)
    assert response.status_code == 403
    assert (await response.get_json())["code"] == "not_a_member"


async def test_exchange_is_public_but_single_use(served: Any) -> None:
    _, client, world = served
    secret = await issue_login_token(store_of(served[0]), world.owner_id, world.org_a)
    granted = await exchange(client, secret)
    assert granted["org_id"] == world.org_a and granted["role"] == "owner"
    again = await client.post("/v1/auth/token", json={"token": secret})
    assert again.status_code == 401
