"""The route rule table: what every registered route requires, in one place.

Keyed by (method, URL rule) exactly as Quart registers it (``request.url_rule.rule``);
``HEAD`` uses the ``GET`` rule and the automatic ``OPTIONS`` answer is public. WebSocket
routes use the method ``"WEBSOCKET"``. The auth hook (``runplane/http/auth_hook.py``) enforces
the table before any route runs; ``tests/http/test_route_matrix.py`` fails when a
registered route has no rule here. **Adding a route? Add its rule to RULES below, and a
case with the spec's tier to CASES in tests/http/test_route_matrix.py.**

Requirements (see docs/auth.md for the full decision table):

- ``public``: nobody is refused (health, whoami, roles, login exchange/logout, uploads and
  artifacts, routes that authenticate in the handler).
- ``read``: any principal; the anonymous caller only when auth is not ``required``.
  Reads are narrowed to the principal's org by the route (``current_caller().read_org``).
- ``scope``: like read, and a principal must hold ``scope`` (403 otherwise).
- ``manage``: the admin token or an org owner/admin (403 for other principals; 401 for
  the anonymous caller in every mode). Routes narrow a non-superuser to its own org.
- ``org_manage``: the admin token, or an owner/admin *of the org named by the route's
  ``org_id``*: a login session by its user's membership there, an access token by its
  role in its own org. A principal outside that org gets the 404 of an unknown org; one
  inside it with a lesser role 403; the anonymous caller 401.
- ``admin``: the operator admin token only (401 for anybody else, spec).
- ``operator``: the operator admin token only; other *authenticated* principals get 403
  ``operator_token_required`` (the spec's answer for seat and node update).
- ``user_session``: a login session (403 ``user_session_required`` for tokens).

``identity=True``: the route exists only with a database; 404 without one (memory store).
``query_token=True``: the credential may also come as ``?token=`` (browser EventSource).
``stream_ticket=True``: a stream ticket may stand in for the credential; the hook then
authenticates nobody and the route verifies the ticket (401 when it is not valid).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Need = Literal[
    "public", "read", "scope", "manage", "org_manage", "admin", "operator", "user_session"
]

WEBSOCKET = "WEBSOCKET"


@dataclass(frozen=True, slots=True)
class Rule:
    need: Need
    scope: str | None = None
    identity: bool = False
    query_token: bool = False
    #: a stream ticket (``?ticket=`` or ``Bearer rpst_...``) stands in for the credential;
    #: the route checks it (runplane/streams/tickets.py)
    stream_ticket: bool = False
    #: a share code or an embed token of the route's job (``?share=``/``X-Share-Token``,
    #: ``?embed=``/``X-Embed-Token``, or as the bearer) reads it when it allows one of
    #: these categories (runplane/auth/shares.py); () = no share reads this route
    shared: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.need == "scope") != (self.scope is not None):
            raise ValueError("a scope rule names its scope, and only a scope rule does")


PUBLIC = Rule("public")
READ = Rule("read")
MANAGE = Rule("manage")
ADMIN = Rule("admin")


def scope(name: str) -> Rule:
    return Rule("scope", scope=name)


RULES: dict[tuple[str, str], Rule] = {
    # --- health and discovery -----------------------------------------------------------
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/v1/healthz"): PUBLIC,
    # a replica's role and the leader it knows (operations: which replica leads)
    ("GET", "/v1/ha"): PUBLIC,
    # the OpenAPI document (docs/api.md "OpenAPI"): generated from the routes, no data
    ("GET", "/openapi.json"): PUBLIC,
    ("GET", "/v1/openapi.json"): PUBLIC,
    # Prometheus (docs/operations.md "Metrics"): open deploys anyone; with auth required
    # the route asks for the admin token or RUNPLANE_METRICS_TOKEN (a scraper's bearer)
    ("GET", "/metrics"): PUBLIC,
    # the MCP tool facade (docs/mcp.md): a bearer like any read; each tool call is a request
    # to the tool's route with the same credential, decided there by that route's rule
    ("POST", "/mcp"): READ,
    ("POST", "/v1/mcp"): READ,
    # the web UI (docs/ui.md): its assets (Quart's static route) and the pages' shell
    ("GET", "/static/<path:filename>"): PUBLIC,
    ("GET", "/"): PUBLIC,
    ("GET", "/jobs/<job_id>"): PUBLIC,
    ("GET", "/embed"): PUBLIC,
    ("GET", "/submit"): PUBLIC,
    ("GET", "/nodes"): PUBLIC,
    ("GET", "/pipelines"): PUBLIC,
    ("GET", "/sessions"): PUBLIC,
    ("GET", "/pipelines/<run_id>"): PUBLIC,
    ("GET", "/v1/auth/whoami"): PUBLIC,
    ("GET", "/v1/roles"): PUBLIC,
    # --- tokens (operator) ----------------------------------------------------------------
    ("POST", "/v1/auth/tokens"): ADMIN,
    ("GET", "/v1/auth/tokens"): ADMIN,
    ("DELETE", "/v1/auth/tokens/<token_id>"): ADMIN,
    # --- identity: login sessions, seats, orgs, members (database only) --------------------
    ("POST", "/v1/auth/token"): Rule("public", identity=True),
    ("POST", "/v1/auth/logout"): Rule("public", identity=True),  # ends the bearer's session
    ("POST", "/v1/auth/seat"): Rule("operator", identity=True),
    ("POST", "/v1/orgs"): Rule("user_session", identity=True),
    ("GET", "/v1/orgs"): Rule("user_session", identity=True),
    ("GET", "/v1/orgs/<org_id>/members"): Rule("org_manage", identity=True),
    ("POST", "/v1/orgs/<org_id>/members"): Rule("org_manage", identity=True),
    ("DELETE", "/v1/orgs/<org_id>/members/<user_id>"): Rule("org_manage", identity=True),
    # --- operator controls ------------------------------------------------------------------
    ("GET", "/v1/admin/channel-target"): ADMIN,
    ("POST", "/v1/admin/channel-target"): ADMIN,
    ("GET", "/v1/admin/audit"): MANAGE,
    # git connections (docs/git.md): owners/admins hold git:connect (via *), members git:read
    ("POST", "/v1/git/connections"): scope("git:connect"),
    ("GET", "/v1/git/connections"): scope("git:read"),
    # an agent fetching a connection's repository for a job: the handler checks the
    # attempt's git fetch ticket (Basic auth), as /v1/nodes/connect checks its hello
    ("GET", "/v1/git/proxy/<connection_id>/info/refs"): PUBLIC,
    ("POST", "/v1/git/proxy/<connection_id>/git-upload-pack"): PUBLIC,
    # org secrets (docs/secrets.md): the admin token or an org owner/admin, own org
    ("PUT", "/v1/secrets/<name>"): MANAGE,
    ("GET", "/v1/secrets"): MANAGE,
    ("DELETE", "/v1/secrets/<name>"): MANAGE,
    # outgoing webhooks (docs/webhooks.md): the admin token or an org owner/admin, own org
    ("POST", "/v1/webhooks"): MANAGE,
    ("GET", "/v1/webhooks"): MANAGE,
    ("DELETE", "/v1/webhooks/<webhook_id>"): MANAGE,
    ("POST", "/v1/webhooks/<webhook_id>/test"): MANAGE,
    ("GET", "/v1/webhooks/<webhook_id>/deliveries"): MANAGE,
    ("POST", "/v1/nodes/join-tokens"): ADMIN,
    ("GET", "/v1/nodes/join-tokens"): ADMIN,
    ("DELETE", "/v1/nodes/join-tokens/<token_id>"): ADMIN,
    # --- stacks, jobs, nodes ------------------------------------------------------------------
    ("GET", "/v1/stacks"): READ,
    ("GET", "/v1/stacks/<name>"): READ,
    ("POST", "/v1/jobs"): scope("runs:submit"),
    ("GET", "/v1/jobs"): READ,
    ("GET", "/v1/jobs/<job_id>"): Rule("read", shared=("view",)),
    ("POST", "/v1/jobs/<job_id>/cancel"): scope("runs:cancel"),
    ("POST", "/v1/jobs/<job_id>/priority"): scope("runs:priority"),
    ("POST", "/v1/jobs/<job_id>/rerun"): scope("runs:submit"),
    # job arrays (docs/jobs.md "Job arrays"): a batch submits, an array cancel cancels
    ("POST", "/v1/jobs/batch"): scope("runs:submit"),
    ("GET", "/v1/arrays/<array_id>"): READ,
    ("POST", "/v1/arrays/<array_id>/cancel"): scope("runs:cancel"),
    ("GET", "/v1/jobs/<job_id>/logs"): Rule("read", shared=("logs",)),
    ("GET", "/v1/jobs/<job_id>/artifacts"): Rule("read", shared=("artifacts",)),
    # The only route that also accepts ?token= (browser EventSource cannot set headers).
    ("GET", "/v1/jobs/<job_id>/events"): Rule("read", query_token=True, shared=("logs", "metrics")),
    ("GET", "/v1/nodes"): READ,
    # cross-org node grants (docs/placement.md): owners/admins hold nodes:grant (via *);
    # the routes narrow a non-superuser to grants of its own org
    ("POST", "/v1/nodes/grants"): scope("nodes:grant"),
    ("GET", "/v1/nodes/grants"): READ,
    ("DELETE", "/v1/nodes/grants/<grant_id>"): scope("nodes:grant"),
    # overrides: the admin token or an owner/admin of the owning org (the route: a node of
    # another org is 404, one no org owns 403 to everybody but the admin token)
    ("PATCH", "/v1/nodes/<node_id>"): MANAGE,
    ("GET", "/v1/nodes/<node_id>/metrics"): READ,
    # self-update: fleet-wide operator control (spec: the admin token)
    ("POST", "/v1/nodes/<node_id>/update"): ADMIN,
    # --- realtime streams (docs/streams.md) ------------------------------------------------
    ("GET", "/v1/jobs/<job_id>/streams"): Rule("read", shared=("streams",)),
    ("POST", "/v1/jobs/<job_id>/streams/<name>/subscribe"): Rule("read", shared=("streams",)),
    # a ticket from subscribe, or (data only) any credential that may read the job
    ("GET", "/v1/jobs/<job_id>/streams/<name>/data"): Rule("read", stream_ticket=True),
    # a ticket only (the route refuses a request without one: 401)
    ("POST", "/v1/jobs/<job_id>/streams/<name>/teleop"): Rule("read", stream_ticket=True),
    ("GET", "/v1/jobs/<job_id>/recording"): Rule("read", shared=("streams", "metrics")),
    # share links and embed grants (docs/sharing.md)
    ("POST", "/v1/jobs/<job_id>/share"): scope("runs:share"),
    ("DELETE", "/v1/jobs/<job_id>/share"): scope("runs:share"),
    ("GET", "/s/<code>"): PUBLIC,
    # runs:manage, runs:share or runs:submit (any of): checked by the route
    ("POST", "/v1/jobs/<job_id>/embed"): READ,
    ("GET", "/v1/embed/grant"): PUBLIC,
    ("GET", "/embed/e/<token>"): PUBLIC,
    # --- runs (RunSpec), entitlements, policy ---------------------------------------------
    ("POST", "/v1/runs"): scope("runs:submit"),
    ("GET", "/v1/runs"): READ,
    ("GET", "/v1/runs/<run_id>"): READ,
    ("POST", "/v1/runs/validate"): scope("runs:submit"),
    ("POST", "/v1/runs/resolve"): scope("runs:submit"),
    ("GET", "/v1/me/entitlements"): READ,
    # tenant-filtered: the admin token (and an open deploy's anonymous caller) see all
    ("GET", "/v1/analytics/jobs"): READ,
    # --- pipelines (docs/pipelines.md) ------------------------------------------------------
    ("POST", "/v1/pipelines"): scope("runs:submit"),
    ("GET", "/v1/pipelines"): READ,
    ("POST", "/v1/pipelines/validate"): scope("runs:submit"),
    ("GET", "/v1/pipelines/<run_id>"): READ,
    ("POST", "/v1/pipelines/<run_id>/cancel"): scope("runs:cancel"),
    # an addition (docs/pipelines.md "Retry"): it launches new stage jobs
    ("POST", "/v1/pipelines/<run_id>/retry"): scope("runs:submit"),
    # schedules (docs/schedules.md, an addition): changing one needs what submitting needs
    ("POST", "/v1/schedules"): scope("runs:submit"),
    ("GET", "/v1/schedules"): READ,
    ("GET", "/v1/schedules/<schedule_id>"): READ,
    ("PATCH", "/v1/schedules/<schedule_id>"): scope("runs:submit"),
    ("DELETE", "/v1/schedules/<schedule_id>"): scope("runs:submit"),
    # --- sessions (docs/sessions.md) ---------------------------------------------------------
    ("POST", "/v1/sessions"): scope("runs:submit"),
    ("GET", "/v1/sessions"): READ,
    ("GET", "/v1/sessions/<session_id>"): READ,
    ("DELETE", "/v1/sessions/<session_id>"): scope("runs:cancel"),
    ("POST", "/v1/sessions/<session_id>/keepalive"): scope("runs:submit"),
    # always 501 (after the 404 of an unknown or another org's session)
    ("POST", "/v1/sessions/<session_id>/signal"): READ,
    ("GET", "/v1/policy/preflight"): scope("runs:submit"),
    ("POST", "/v1/policy/preflight"): scope("runs:submit"),
    ("GET", "/v1/policy"): MANAGE,
    ("PUT", "/v1/policy"): MANAGE,
    ("GET", "/v1/policy/preview"): MANAGE,
    ("POST", "/v1/policy/preview"): MANAGE,
    # The agent WebSocket authenticates in its handler (node credential, join token or
    # open enrollment; runplane/actors/fleet.py), so the HTTP layer lets it through.
    (WEBSOCKET, "/v1/nodes/connect"): PUBLIC,
    # --- uploads and artifacts: auth-exempt, trust by grant (spec point 3) ------------------
    # (artifacts-zip does its own org-ownership check with current_caller().read_org)
    ("POST", "/v1/uploads"): PUBLIC,
    ("PUT", "/v1/artifacts/<anykey:key>"): PUBLIC,
    ("GET", "/v1/artifacts/<anykey:key>"): PUBLIC,
    ("GET", "/v1/artifacts-zip/<anykey:prefix>"): PUBLIC,
}


#: For a route missing from RULES (a bug the route-matrix test reports): the strictest tier
#: an open deploy still lets through. Anonymous callers pass only where auth is not
#: ``required``; a credential must hold every scope (``*``). The hook logs an error.
UNLISTED = scope("*")


def rule_for(method: str, rule: str, *, websocket: bool = False) -> Rule | None:
    """The rule of a matched route; None when the table has none (the hook then refuses)."""
    if websocket:
        return RULES.get((WEBSOCKET, rule))
    if method == "HEAD":
        method = "GET"
    return RULES.get((method, rule))


def methods_of(url_rule: object) -> list[str]:
    """The methods a Quart url rule needs table entries for (HEAD rides on GET; automatic
    OPTIONS is public; a WebSocket rule needs one WEBSOCKET entry)."""
    if getattr(url_rule, "websocket", False):
        return [WEBSOCKET]
    methods = set(getattr(url_rule, "methods", None) or ())
    methods.discard("HEAD")
    if getattr(url_rule, "provide_automatic_options", False):
        methods.discard("OPTIONS")
    return sorted(methods)
