"""The response models of jobs, their logs, streams, shares, arrays and runs."""

from __future__ import annotations

from typing import Any, Literal

from .base import Number, Phase, RunProblem, View

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
    #: the retry policy (docs/jobs.md "Retries"), null without one
    retry: dict[str, Any] | None = None
    #: whether it may be preempted, and its grace then (docs/placement.md "Preemption")
    preemptible: bool = False
    preempt_grace_sec: int | None = None


class StreamCount(View):
    """One realtime stream of a job and the chunks received so far."""

    name: str
    kind: str
    count: int


class LogTruncated(View):
    kept: int
    dropped: int


class JobRank(View):
    """One rank of a gang (docs/jobs.md "Multi-node jobs")."""

    rank: int
    node_id: str
    phase: Phase


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
    #: times it was preempted and requeued (docs/placement.md "Preemption")
    preemptions: int | None = None
    #: a gang's ranks (docs/jobs.md "Multi-node jobs"): 1 for a plain job
    nodes: int | None = None
    #: each rank's node and phase in the current (or last) attempt; [] for a plain job
    ranks: list[JobRank] = []
    array_id: str | None = None
    array_index: int | None = None
    expired_at: str | None = None
    #: the job this one is a rerun of
    rerun_of: str | None = None
    #: how the process ended, as its agent saw it (null until it ended)
    exit_code: int | None = None
    signal: str | None = None
    #: the GPU devices its node assigned (UUIDs, else indices)
    gpus: list[str] = []
    #: the pipeline run and stage that launched it
    pipeline_run_id: str | None = None
    stage: str | None = None
    #: the session whose pod it carries (docs/sessions.md)
    session_id: str | None = None
    #: its realtime streams (docs/streams.md)
    streams: list[StreamCount] = []
    #: when its log lines were capped: how many were kept and dropped
    log_truncated: LogTruncated | None = None


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
    #: a session pod's service (docs/sessions.md)
    service: str | None = None
    #: a gang's rank that wrote it (docs/jobs.md "Multi-node jobs")
    rank: int | None = None


class MetricPoint(View):
    step: int | None = None
    values: dict[str, Number]
    #: a gang's rank that reported it
    rank: int | None = None


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
    count: int | None = None
    #: why a video stream cannot be subscribed
    note: str | None = None


class StreamTicket(View):
    session_id: str
    transport: str
    ticket: str
    url: str
    #: when the ticket expires (unix seconds)
    expires_at: int | None = None
    #: whether the ticket may also send teleop commands
    teleop: bool | None = None


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
    started_at: int | None = None
    ended_at: int | None = None
    streams: list[StreamCount] = []
    truncated: dict[str, bool] = {}


class ShareResult(View):
    token: str
    code: str
    url: str
    expires_at: str | None = None


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
    #: what admission changed (limits clamped to the policy's ceilings)
    clamp_notes: list[str] = []
    #: ``POST /v1/runs``: the run's id (its job's)
    run_id: str | None = None


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


class RunDetail(Job):
    """The run's job, with its RunSpec and its one stage."""

    run_id: str
    has_runspec: bool | None = None
    run: dict[str, Any] | None = None
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
    spec_hash: str | None = None
