"""The response bodies of the API as pydantic models: the schemas of the OpenAPI document.

The routes build their answers from the domain's view functions (``job_view``,
``node_view``, ...); these models describe those answers for the document and for the
clients generated from it, under the spec's names (Job, Node, PipelineRun, ...). Fields
the spec requires are required here; every other field is optional, and every model
allows fields it does not name (the additions the docs list), so a client written
against the document keeps working as views grow. The schemathesis run in
``scripts/test`` checks every answer against these models.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Phase = Literal[
    "queued", "assigned", "pulling", "running", "succeeded", "failed", "timeout", "cancelled"
]
Number = float  # JSON numbers: some views carry whole numbers, some fractions


class View(BaseModel):
    """A response body: fields beyond the named ones may appear (documented additions)."""

    model_config = ConfigDict(extra="allow")


# -- problems ---------------------------------------------------------------------------


class RunProblem(View):
    key: str
    code: str
    message: str


class ProblemDetails(View):
    """RFC 9457 problem details, the body of every error (``application/problem+json``)."""

    type: str
    title: str
    status: int
    detail: str
    code: str
    errors: list[RunProblem] | None = None
    request_id: str | None = None


# -- jobs -------------------------------------------------------------------------------


class ArtifactRef(View):
    artifact: str
    ref: str
    sha256: str | None = None
    size: int | None = None


class JobViewSpec(View):
    command: list[str] = []
    setup: str = ""
    display: bool = False
    env: dict[str, str] = {}
    config: dict[str, Any] = {}
    workspace: dict[str, Any] | None = None
    inputs: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
    resources: dict[str, Any] = {}


class Job(View):
    """The canonical job view (spec: Job)."""

    job_id: str
    stack: str
    phase: Phase
    image: str | None = None
    node_id: str | None = None
    priority: int | None = None
    mode: str | None = None
    seed: int | None = None
    spec_hash: str | None = None
    project: str | None = None
    org_id: str | None = None
    attempt: int | None = None
    attempts: int | None = None
    created_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    duration_ms: int | None = None
    error: str | None = None
    spec: JobViewSpec | None = None
    final_metrics: dict[str, Number] = {}
    artifacts: list[ArtifactRef] = []
    wait_reason: str | None = None
    retries: int | None = None
    tries: list[dict[str, Any]] = []
    retry_at: str | None = None
    array_id: str | None = None
    array_index: int | None = None
    expired_at: str | None = None


class CancelResult(Job):
    cancelled: bool
    killed_on_node: bool


class JobPage(View):
    items: list[Job]
    next_cursor: str
    has_more: bool
    total: int | None = None


class LogLine(View):
    stream: str
    line: str


class MetricPoint(View):
    step: int | None = None
    values: dict[str, Number]


class JobLogs(View):
    logs: list[LogLine]
    metrics: list[MetricPoint]
    phase: str
    next_seq: int | None = None


class StreamView(View):
    name: str
    kind: str
    enabled: bool | None = None
    transport: str | None = None
    fps: int | None = None
    width: int | None = None
    height: int | None = None
    subscribable: bool | None = None


class StreamTicket(View):
    session_id: str
    transport: str
    ticket: str
    url: str


class TeleopResult(View):
    delivered: bool
    stream: str
    seq: int


class JobRecording(View):
    job_id: str
    phase: str
    metrics: list[dict[str, Any]]
    logs: list[dict[str, Any]]
    stream_points: list[dict[str, Any]] = []


class ShareResult(View):
    token: str
    code: str
    url: str


class ShareRevoked(View):
    job_id: str
    revoked: int


class EmbedMintResult(View):
    token: str
    url: str
    expires_at: str


class EmbedGrantView(View):
    job: str
    allow: list[Literal["logs", "metrics", "streams", "artifacts"]]
    exp: int
    branding: dict[str, Any] = {}


class BatchItem(View):
    index: int
    job_id: str
    spec_hash: str
    phase: Phase
    clamp_notes: list[str] = []


class BatchRejected(View):
    index: int
    status: int
    code: str
    detail: str
    errors: list[RunProblem] = []


class BatchSubmitted(View):
    """A job array accepted: its jobs in array order, and (``atomic: false``) the items
    left out."""

    array_id: str
    count: int
    jobs: list[BatchItem]
    rejected: list[BatchRejected] = []


class JobArray(View):
    array_id: str
    org_id: str
    project: str
    submitted_by: str
    count: int
    sweep: dict[str, list[Any]] | None = None
    created_at: str
    phases: dict[str, int]


class ArrayCancelResult(View):
    array_id: str
    cancelled: int
    not_cancelled: int


class JobSubmitted(Job):
    """A created job; ``POST /v1/runs?embed=1`` adds its ``embed`` grant beside it."""

    embed: EmbedMintResult | None = None


# -- runs (RunSpec) ---------------------------------------------------------------------


class RunRow(View):
    job_id: str
    run_id: str
    has_runspec: bool
    stack: str
    phase: str
    project: str | None = None
    created_at: str | None = None


class RunPage(View):
    items: list[RunRow]
    next_cursor: str
    has_more: bool
    total: int | None = None


class RunDetail(View):
    run_id: str
    stages: list[dict[str, Any]] = []


class Validation(View):
    ok: bool
    errors: list[RunProblem]
    warnings: list[RunProblem]


class RunValidation(Validation):
    stack: str


class RunResolution(View):
    resolved: dict[str, Any]
    diff: list[dict[str, Any]]
    validation: Validation


# -- nodes ------------------------------------------------------------------------------


class Node(View):
    id: str
    name: str | None = None
    disabled: bool | None = None
    tier: str | None = None
    status: str | None = None
    agent_version: str | None = None
    channel: str | None = None
    cpu_cores: Number | None = None
    ram_gb: Number | None = None
    gpus: int | None = None
    used_cpu: Number | None = None
    used_ram: Number | None = None
    used_gpu: Number | None = None
    running_jobs: list[dict[str, Any]] = []
    last_heartbeat: str | None = None


class NodePage(View):
    items: list[Node]
    next_cursor: str
    has_more: bool


class NodePatchResult(View):
    id: str
    name: str | None = None
    disabled: bool | None = None
    cpu_cores: Number | None = None
    ram_gb: Number | None = None
    max_concurrency: int | None = None


class NodeSample(View):
    ts: int
    cpu: Number | None = None
    ram: Number | None = None
    gpu: Number | None = None
    jobs: int | None = None
    load: Number | None = None


class NodeMetrics(View):
    node_id: str
    window: str
    samples: list[NodeSample]


class NodeUpdateResult(View):
    node_id: str
    update_sent: bool
    up_to_date: bool | None = None
    current_version: str | None = None
    target_version: str | None = None
    note: str | None = None


class NodeGrantView(View):
    id: str
    owner_org: str | None = None
    grantee_org: str
    selector: dict[str, Any] = {}


class NodeGrantList(View):
    grants: list[NodeGrantView] = []


class JoinTokenMint(View):
    id: str
    token: str
    tier: str | None = None


class JoinTokenView(View):
    id: str
    tier: str | None = None
    revoked: bool | None = None


# -- identity ---------------------------------------------------------------------------


class Principal(View):
    kind: str
    subject: str | None = None
    org_id: str | None = None
    name: str | None = None
    scopes: list[str] = []


class Role(View):
    name: str
    scopes: list[str]


class MintResult(View):
    id: str
    token: str
    kind: str | None = None
    subject: str | None = None
    scopes: list[str] = []


class TokenView(View):
    id: str
    kind: str | None = None
    subject: str | None = None
    revoked: bool | None = None


class SessionResult(View):
    session_token: str
    expires_at: str | None = None
    user_id: str | None = None
    org_id: str | None = None


class Org(View):
    id: str
    name: str | None = None
    kind: str | None = None


class OrgMember(View):
    user_id: str
    role: str


class AuditRow(View):
    id: str
    action: str
    created_at: str | None = None


class Entitlements(View):
    principal: Principal
    org: str
    usage: dict[str, Any]
    limits: dict[str, Any]
    remaining: dict[str, Any]


class JobAnalytics(View):
    window: str
    buckets: list[dict[str, Any]]
    summary: dict[str, int]


class ChannelTargets(View):
    """Each channel's target agent version (``stable``, ...)."""


class Deleted(View):
    """What a DELETE answers with a body: the id removed, and whether it was there."""


# -- stacks, pipelines, sessions, schedules -----------------------------------------------


class Stack(View):
    name: str
    version: str | None = None
    image: str | None = None
    config: list[dict[str, Any]] = []
    launch: dict[str, Any] | None = None


class PipelineRun(View):
    pipeline_run_id: str
    status: Literal["pending", "running", "succeeded", "failed", "cancelled"]
    name: str | None = None
    stage_count: int | None = None
    progress: dict[str, int] = {}
    stages: list[dict[str, Any]] | None = None


class PipelineValidation(View):
    ok: bool


class SessionView(View):
    id: str
    job_id: str | None = None
    phase: Literal["launching", "ready", "idle", "stopping", "stopped", "failed"]


class ScheduleView(View):
    id: str
    name: str | None = None
    suspend: bool | None = None
    next_run_at: str | None = None
    last_run_at: str | None = None


# -- policy ---------------------------------------------------------------------------------


class PolicyView(View):
    org_id: str
    policy: dict[str, Any]
    effective: dict[str, Any]


class PolicyPreflight(View):
    allowed: bool
    clamp_notes: list[str] = []
    http_status: int | None = None


class PolicyPreview(View):
    org_id: str
    effective: dict[str, Any]


# -- integrations ---------------------------------------------------------------------------


class SecretView(View):
    name: str
    updated_at: str | None = None


class WebhookView(View):
    id: str
    url: str
    events: list[str]
    enabled: bool | None = None


class WebhookCreated(WebhookView):
    secret: str


class WebhookDelivery(View):
    id: str
    status: Literal["pending", "delivered", "failed"]
    attempts: int | None = None


class WebhookTestResult(View):
    delivery_id: str | None = None


class GitConnectionView(View):
    id: str
    provider: str
    repo_url: str
    status: str | None = None


# -- artifacts and health ---------------------------------------------------------------------


class UploadResult(View):
    url: str
    path: str
    name: str


class ArtifactStored(View):
    key: str | None = None
    size: int | None = None


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
    role: Literal["leader", "follower", "starting", "lost"]
    epoch: int | None
    leader: HaLeader | None = None
