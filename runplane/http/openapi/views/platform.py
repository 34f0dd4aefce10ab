"""The response models of stacks, pipelines, sessions, schedules, policy, the
integrations (secrets, webhooks, git), artifacts and high availability."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import RootModel

from .base import Number, RunProblem, View

# -- stacks, pipelines, sessions, schedules -----------------------------------------------


class Stack(View):
    """A stack in the view asked (``?view=``: summary, launch or full)."""

    name: str
    version: str | None = None
    image: str | None = None
    config: list[dict[str, Any]] = []
    launch: dict[str, Any] | None = None
    modes: list[str] = []
    display_name: str | None = None
    description: str | None = None
    categories: list[str] = []
    requires: dict[str, Any] = {}
    metrics: list[dict[str, Any]] = []
    default_command: list[str] = []
    default_outputs: list[dict[str, Any]] = []
    streams: list[dict[str, Any]] = []
    docs: str | None = None
    examples: list[dict[str, Any]] = []
    #: the server cannot run it now (docs/stacks.md)
    unavailable: bool | None = None


class PipelineRun(View):
    pipeline_run_id: str
    status: Literal["pending", "running", "succeeded", "failed", "cancelled"]
    name: str | None = None
    stage_count: int | None = None
    progress: dict[str, int] = {}
    stages: list[dict[str, Any]] | None = None
    project: str | None = None
    org_id: str | None = None
    created_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    retries: int | None = None


class PipelineValidation(View):
    ok: bool
    errors: list[RunProblem] = []
    stages: list[dict[str, Any]] = []


class SessionView(View):
    id: str
    job_id: str | None = None
    phase: Literal["launching", "ready", "idle", "stopping", "stopped", "failed"]
    org_id: str | None = None
    name: str | None = None
    project: str | None = None
    idle_ttl_sec: int | None = None
    created_at: str | None = None
    last_keepalive: str | None = None
    started_at: str | None = None
    stopped_at: str | None = None
    error: str | None = None
    #: the detail view: its services, actions and teleop stream
    services: list[dict[str, Any]] | None = None
    actions: list[dict[str, Any]] | None = None
    teleop_stream: str | None = None


class KeptSession(View):
    id: str
    phase: Literal["launching", "ready", "idle"]
    last_keepalive: str | None = None


class KeepaliveBatchResult(View):
    """``POST /v1/sessions/keepalive``: the sessions kept alive, in the order asked; the
    ids not found (unknown, or another org's), and those not live (ended)."""

    sessions: list[KeptSession]
    not_found: list[str]
    not_live: list[str]


class ScheduleView(View):
    """A schedule: the job (``job``) or pipeline (``pipeline``) body it submits, when,
    and (one schedule) its recent runs."""

    schedule_id: str
    org_id: str | None = None
    name: str | None = None
    cron: str | None = None
    every: str | None = None
    timezone: str | None = None
    concurrency: str | None = None
    suspend: bool | None = None
    job: dict[str, Any] | None = None
    pipeline: dict[str, Any] | None = None
    created_by: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    next_run_at: str | None = None
    last_run_at: str | None = None
    last_error: str | None = None
    runs: list[dict[str, Any]] | None = None


# -- policy ---------------------------------------------------------------------------------


class PolicyView(View):
    org_id: str
    policy: dict[str, Any]
    effective: dict[str, Any]
    platform: dict[str, Any] | None = None
    effective_caps: dict[str, Any] | None = None
    #: ``PUT``: where the document asks for more than the platform allows
    notes: list[str] | None = None


class PolicyPreflight(View):
    allowed: bool
    clamp_notes: list[str] = []
    http_status: int | None = None
    org: str | None = None
    stack: str | None = None
    clamped: dict[str, Number] = {}
    reason: str | None = None
    stack_error: str | None = None
    concurrency: dict[str, Any] = {}


class PolicyPreview(View):
    org_id: str
    effective: dict[str, Any]
    subject: str | None = None
    project: str | None = None
    effective_caps: dict[str, Any] | None = None
    stack: str | None = None
    stack_error: str | None = None
    effective_manifest: dict[str, Any] | None = None


# -- integrations ---------------------------------------------------------------------------


class SecretView(View):
    name: str
    updated_at: str | None = None
    org_id: str | None = None
    created_by: str | None = None
    created_at: str | None = None
    updated_by: str | None = None


class WebhookView(View):
    id: str
    url: str
    events: list[str]
    enabled: bool | None = None
    org_id: str | None = None
    created_at: str | None = None


class WebhookCreated(WebhookView):
    secret: str
    note: str | None = None


class WebhookDelivery(View):
    id: str
    status: Literal["pending", "delivered", "failed"]
    attempts: int | None = None
    endpoint_id: str | None = None
    event: str | None = None
    response_code: int | None = None
    error: str | None = None
    job_id: str | None = None
    next_attempt_at: str | None = None
    created_at: str | None = None
    updated_at: str | None = None


class WebhookTestResult(View):
    delivery_id: str | None = None
    status: str | None = None


class GitConnectionView(View):
    id: str
    provider: str
    repo_url: str
    status: str | None = None
    org_id: str | None = None
    base_url: str | None = None
    auth_kind: str | None = None
    label: str | None = None
    default_ref: str | None = None
    status_reason: str | None = None
    #: the deploy key's public half (shown when the connection is created)
    ssh_pub: str | None = None
    report_status: bool | None = None
    created_at: str | None = None
    note: str | None = None


class RegistryCredentialView(View):
    id: str
    registry: str
    username: str
    org_id: str | None = None
    created_at: str | None = None


# -- artifacts and health ---------------------------------------------------------------------


class UploadResult(View):
    url: str
    path: str
    name: str
    key: str | None = None
    size: int | None = None
    sha256: str | None = None


class ArtifactStored(View):
    key: str | None = None
    size: int | None = None
    ref: str | None = None
    sha256: str | None = None


# -- high availability ------------------------------------------------------------------


class HaLeader(View):
    replica: str
    address: str
    epoch: int
    since: int
    lease_ends_in_ms: int


class HaStatus(View):
    """``GET /v1/ha``: this replica's view of the leader lease (docs/operations.md)."""

    ha: bool
    replica: str | None
    #: the address other replicas reach this one at
    address: str | None = None
    role: Literal["leader", "follower", "starting", "lost"]
    epoch: int | None
    leader: HaLeader | None = None


# -- the MCP facade (JSON-RPC 2.0) ---------------------------------------------------------


class RpcErrorObject(View):
    code: int
    message: str
    data: Any = None


class RpcResponse(View):
    """One JSON-RPC 2.0 response: a ``result`` (its shape is the method's: docs/mcp.md)
    or an ``error``."""

    jsonrpc: Literal["2.0"]
    #: the request's id as it came (null when the request could not be read)
    id: Any
    result: dict[str, Any] | None = None
    error: RpcErrorObject | None = None


class RpcAnswers(RootModel[list[RpcResponse]]):
    """A batch's answers: one response per request (none per notification)."""
