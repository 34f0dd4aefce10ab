"""The agent <-> server protocol over the WebSocket at ``/v1/nodes/connect``: every message
is one JSON text frame, an object with a ``type``, validated by both ends with these models
(unknown fields refused: a mismatch is a clear error, not a guess). The flow, the
fencing of job reports by ``attempt``, resends after a reconnect (``job_finished`` kept
until acknowledged; numbered reports after the server's ``resume`` marks), draining and
self-update: docs/agent.md ("Protocol summary"). A frame of an unknown type is logged and
ignored by both ends. Fields added after the first release are sent only when set (an
older peer refuses unknown fields); new server messages are new types.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
)

PROTOCOL_VERSION = 1
#: WebSocket close codes the server uses (4000-4999 are application codes).
CLOSE_UNAUTHORIZED = 4401  # bad/revoked join token or credential
CLOSE_UPGRADE_REQUIRED = 4426  # protocol version not supported
CLOSE_PROTOCOL_ERROR = 4400  # malformed message
CLOSE_REPLACED = 4409  # the same node connected again; this connection is stale
CLOSE_DISABLED = 4403  # enrollment disabled


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _only_when_set(data: Any, field: str) -> Any:
    """A serialized message without ``field`` when it is unset (None or False): a field
    added after the first release is sent only when set, so an older peer, which refuses
    unknown fields, still reads the frame."""
    if isinstance(data, dict) and (data.get(field) is None or data.get(field) is False):
        data.pop(field, None)
    return data


class _Sparse(_Msg):
    """A message whose fields named in ``_sparse`` are sent only when set."""

    _sparse: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        for field in self._sparse:
            data = _only_when_set(data, field)
        return data


class Gpu(_Msg):
    model: str
    vendor: str = "nvidia"
    vram_gb: int = Field(0, ge=0)
    cuda: str = ""
    #: the device's index and UUID (nvidia-smi); the agent assigns devices by them
    index: int | None = Field(None, ge=0)
    uuid: str = ""


class Facts(_Sparse):
    name: str
    cpu_cores: int = Field(ge=1)
    ram_gb: int = Field(ge=0)
    disk_gb: int = Field(0, ge=0)
    gpus: list[Gpu] = []
    arch: str
    os: str
    capabilities: list[str] = []
    max_concurrency: int = Field(1, ge=1)
    dlperf: float = Field(0.0, ge=0)
    executors: list[str] = ["process"]
    #: a container node's image cache; sent only by one (``--executor container``)
    images: ImageFacts | None = None
    #: how other nodes reach it (``--advertise-address``; a gang's master address)
    advertise_address: str | None = None

    _sparse: ClassVar[tuple[str, ...]] = ("images", "advertise_address")


class RunningJob(_Msg):
    job_id: str
    attempt: int = Field(ge=1)


class Hello(_Sparse):
    type: Literal["hello"] = "hello"
    protocol: int
    agent_version: str
    credential: str | None = None
    join_token: str | None = None
    facts: Facts
    running: list[RunningJob] = []
    channel: str = "stable"
    #: it applies its channel's target version itself (``--auto-update``); sent if true
    auto_update: bool = False

    _sparse: ClassVar[tuple[str, ...]] = ("auto_update",)


class Heartbeat(_Sparse):
    type: Literal["heartbeat"] = "heartbeat"
    running: list[RunningJob] = []
    #: the image cache as it is now; sent only when it changed since the last report
    images: ImageFacts | None = None

    _sparse: ClassVar[tuple[str, ...]] = ("images",)


class JobPhase(_Msg):
    type: Literal["job_phase"] = "job_phase"
    job_id: str
    attempt: int
    phase: Literal["pulling", "running"]
    #: the GPU devices (UUIDs, else indices) the agent assigned to this attempt
    gpus: list[str] = []


class _Numbered(_Sparse):
    """A report the agent numbers within its attempt (``n``, from 1) once the server said
    ``resume``, and keeps after sending to resend what a crashed server did not store. Sent
    only when set, so a server that predates it still reads the frame."""

    n: int | None = Field(None, ge=1)

    _sparse: ClassVar[tuple[str, ...]] = ("n",)


class JobLogs(_Numbered):
    type: Literal["job_logs"] = "job_logs"
    job_id: str
    attempt: int
    #: (stream, line), or (stream, line, service) for a line of a pod's service
    lines: list[
        tuple[Literal["stdout", "stderr", "system"], str]
        | tuple[Literal["stdout", "stderr", "system"], str, str]
    ]


class JobMetric(_Numbered):
    type: Literal["job_metric"] = "job_metric"
    job_id: str
    attempt: int
    step: int | None = None
    values: dict[str, float]


class JobFinished(_Msg):
    type: Literal["job_finished"] = "job_finished"
    job_id: str
    attempt: int
    outcome: Literal["succeeded", "failed", "timeout", "cancelled"]
    exit_code: int | None = None
    #: the signal that ended the process (``SIGTERM``), when one did
    signal: str | None = None
    error: str | None = None
    final_metrics: dict[str, float] = {}
    artifacts: list[dict[str, Any]] = []


#: A stream name: what a job names a file in its streams directory (``<name>``, not
#: ending in ``.teleop``, which is the teleop file of stream ``<name>``).
STREAM_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
TELEOP_SUFFIX = ".teleop"


class StreamChunkIn(_Msg):
    """One chunk a job wrote to a stream (one line of ``<streams dir>/<name>``).
    ``encoding``: ``json`` (the line parsed as JSON: ``data`` is that line), ``base64``
    (the line was ``{"encoding": "base64", "data": ...}``: ``data`` is the base64 text),
    else ``text``. ``ts``: unix ms when the agent read it."""

    data: str
    encoding: Literal["json", "text", "base64"] = "text"
    ts: int = Field(ge=0)


class JobStream(_Msg):
    """Chunks of one stream of the job, in the order written (one wake-up's worth)."""

    type: Literal["job_stream"] = "job_stream"
    job_id: str
    attempt: int
    stream: str = Field(pattern=STREAM_NAME_PATTERN)
    chunks: list[StreamChunkIn] = Field(min_length=1)


class TeleopAck(_Msg):
    """The agent appended teleop frame ``seq`` of ``stream`` to the pod's
    ``<streams dir>/<stream>.teleop`` (``ok``), or could not (``error`` says why)."""

    type: Literal["teleop_ack"] = "teleop_ack"
    job_id: str
    attempt: int
    stream: str
    seq: int
    ok: bool
    error: str | None = None


class Draining(_Msg):
    """The agent is stopping: place nothing more here; jobs still running in
    ``deadline_sec`` seconds are stopped and handed back (``job_released``)."""

    type: Literal["draining"] = "draining"
    deadline_sec: float = Field(0.0, ge=0)


class JobReleased(_Msg):
    """The draining agent stopped this attempt (or never started it): requeue the job.
    With ``declined``, the agent declined the run before starting anything, saying why
    (its GPUs are still held by an ending job): requeued without counting against the
    node's reliability."""

    type: Literal["job_released"] = "job_released"
    job_id: str
    attempt: int
    declined: str | None = None


class UpdateStatus(_Msg):
    """How a self-update to ``version`` goes: ``installing`` (the install command runs),
    ``installed`` (it worked: the agent drains, then re-executes itself), ``failed``
    (``error`` says why; the agent keeps running the version it has)."""

    type: Literal["update_status"] = "update_status"
    version: str
    phase: Literal["installing", "installed", "failed"]
    error: str | None = None


# fmt: off
AgentMsg = (
    Hello | Heartbeat | JobPhase | JobLogs | JobMetric | JobFinished | Draining | JobReleased
    | JobStream | TeleopAck | UpdateStatus
)
# fmt: on
AgentMessage = Annotated[AgentMsg, Field(discriminator="type")]


class Welcome(_Msg):
    type: Literal["welcome"] = "welcome"
    protocol: int = PROTOCOL_VERSION
    node_id: str
    credential: str | None = None  # only when the agent enrolled with a join token
    heartbeat_sec: float = 5.0


class Refused(_Msg):
    """The server refuses this agent: the whole sentence, sent just before it closes with
    ``code`` (a WebSocket close reason holds at most 123 bytes, so the close frame carries
    a shortened one)."""

    type: Literal["refused"] = "refused"
    code: int
    reason: str


#: A mount ``ref`` starting with this is on the server the agent is connected to: the
#: agent puts its server's http(s) origin there (a git connection's repository, fetched
#: through the server's git proxy with the attempt's ticket as ``auth``).
SERVER_REF = "{server}"


class MountSpec(_Sparse):
    """A workspace or input, prepared by the agent while the job is ``pulling``.

    ``path`` is relative to the job's working directory (``""`` is the directory itself;
    the server maps the spec's ``/work/...`` paths). ``ref`` per type: ``inline`` the text,
    ``archive`` an http(s) URL of a .zip/.tar.gz, ``git`` ``<url>[#<rev>]``, ``file`` an
    http(s) URL or a path on the node, ``dir`` a path on the node, an archive URL, or empty."""

    type: Literal["git", "archive", "file", "dir", "inline"]
    path: str = ""
    ref: str = ""
    mode: Literal["ro", "rw"] = "rw"
    #: a git mount of a connection: the HTTP ``Authorization`` header value to fetch with
    #: (kept in memory, given to git through its environment, never written or logged);
    #: sent only when set, so agents from before the field still read run orders
    auth: str | None = Field(None, repr=False)

    _sparse: ClassVar[tuple[str, ...]] = ("auth",)


class OutputGlob(_Msg):
    """Files matched after the command ends are uploaded to ``/v1/artifacts/<job_id>/<path>``."""

    artifact: str
    glob: str
    optional: bool = False


class RunLimits(_Msg):
    """What the agent enforces of the job's ``limits`` (0 / false / empty: not asked).
    ``gpus`` is the number of devices to assign (the job's GPU reservation)."""

    ram_gb: float = Field(0, ge=0)
    cpu_cores: float = Field(0, ge=0)
    pids: int = Field(0, ge=0)
    gpus: int = Field(0, ge=0)
    no_internet: bool = False
    egress_allow: list[str] = []


class PodHealthSpec(_Msg):
    command: list[str]
    period_sec: float
    timeout_sec: float
    retries: int


class RegistryAuth(_Msg):
    """A registry credential for one attempt's pull (an org's, docs/containers.md): held
    in memory, handed to skopeo through a memfd, never written to the node's disk or
    logged."""

    username: str
    password: str = Field(repr=False)


class ImageOrder(_Sparse):
    """The image a job (or a pod service) runs in (``runplane/agent/images/``).

    ``ref`` is the resolved ``<name>@sha256:<hex>`` the job's view shows; ``source`` is the
    same digest at the registry the node pulls from (a mirror the server maps it to, or
    the image's own registry, ``docker://`` form without the scheme); ``insecure``: that
    registry speaks plain HTTP (``RUNPLANE_INSECURE_REGISTRIES``)."""

    ref: str
    source: str
    insecure: bool = False
    #: the credential to pull with; sent only when set
    auth: RegistryAuth | None = Field(None, repr=False)

    _sparse: ClassVar[tuple[str, ...]] = ("auth", "insecure")


class ImageFacts(_Msg):
    """What a container node's image cache holds (``--image-cache-gb``): the digests
    unpacked there (``sha256:<hex>``), most recently used first, and the bytes still free
    under its limit. Placement prefers a node that has a job's image already."""

    digests: list[str] = []
    free_bytes: int = Field(0, ge=0)
    limit_bytes: int = Field(0, ge=0)


class PodServiceSpec(_Sparse):
    """One service of a session's pod (``runplane/agent/pod.py``)."""

    name: str
    command: list[str]
    env: dict[str, str] = {}
    needs: list[str] = []
    health: PodHealthSpec | None = None
    #: the service's own image (its ``image``, else its stack's); sent only when set
    image: ImageOrder | None = None

    _sparse: ClassVar[tuple[str, ...]] = ("image",)


class RunSpec(_Sparse):
    command: list[str]
    env: dict[str, str] = {}
    setup: str | None = None
    timeout_sec: int | None = None
    inline_files: dict[str, str] = {}
    workspace: MountSpec | None = None
    inputs: list[MountSpec] = []
    outputs: list[OutputGlob] = []
    #: the sandbox asked for (``gvisor``, ``kata``); sent only when not ``none``. Any
    #: string: an agent that cannot give it fails the job saying so
    isolation: str | None = None
    #: the limits the agent enforces; sent only when the job has any (as ``isolation``)
    limits: RunLimits | None = None
    #: a session's pod: these services run instead of ``command``; sent only for a pod
    pod: list[PodServiceSpec] | None = None
    #: org secret values in ``env`` (docs/secrets.md): masked ``***`` in its log lines and
    #: stream chunks; sent only when there are any
    mask: list[str] | None = Field(None, repr=False)
    #: the image the job runs in (``--executor container``; a pod's services: their own)
    image: ImageOrder | None = None
    #: a gang's rank 0: the port it must be able to listen on (else the attempt fails)
    master_port: int | None = None

    _sparse: ClassVar[tuple[str, ...]] = ("isolation", "limits", "pod", "mask", "image",
                                          "master_port")  # fmt: skip


class Run(_Msg):
    type: Literal["run"] = "run"
    job_id: str
    attempt: int
    spec: RunSpec


class Cancel(_Sparse):
    type: Literal["cancel"] = "cancel"
    job_id: str
    attempt: int
    #: a preemption's (sent only then): its grace before SIGKILL, and the preemptor
    grace_sec: int | None = Field(None, ge=0)
    preempted_by: str | None = None
    _sparse: ClassVar[tuple[str, ...]] = ("grace_sec", "preempted_by")


class Teleop(_Msg):
    """A teleop control frame for the job's process: append
    ``{"seq": seq, "ts": ts, "frame": <frame>}`` (one line; ``frame`` is compact JSON
    text, written as it is) to ``<streams dir>/<stream>.teleop``, then answer
    :class:`TeleopAck`."""

    type: Literal["teleop"] = "teleop"
    job_id: str
    attempt: int
    stream: str = Field(pattern=STREAM_NAME_PATTERN)
    seq: int = Field(ge=1)
    ts: int = Field(ge=0)
    frame: str


class FinishedAck(_Msg):
    type: Literal["finished_ack"] = "finished_ack"
    job_id: str
    attempt: int


class Update(_Msg):
    """Run agent ``version``: ``requested`` by an operator (always applied), else the
    node's channel target (applied only with ``--auto-update``)."""

    type: Literal["update"] = "update"
    version: str = Field(min_length=1, max_length=128)
    requested: bool = False


class ReportMark(_Msg):
    """The last numbered report of an attempt the server has stored (0: none)."""

    job_id: str
    attempt: int
    n: int = Field(ge=0)


class Resume(_Msg):
    """Sent right after ``welcome``: for each attempt the hello listed that the server
    still runs on this node, the last numbered report it stored. The agent resends the
    reports it sent after those (a crashed server, or a killed HA leader, may not have
    stored them), then numbers its reports in this session (docs/agent.md)."""

    type: Literal["resume"] = "resume"
    marks: list[ReportMark] = []


ServerMsg = Welcome | Refused | Run | Cancel | FinishedAck | Teleop | Update | Resume
ServerMessage = Annotated[ServerMsg, Field(discriminator="type")]

_agent_adapter: TypeAdapter[AgentMsg] = TypeAdapter(AgentMessage)
_server_adapter: TypeAdapter[ServerMsg] = TypeAdapter(ServerMessage)


def decode_agent(text: str | bytes) -> AgentMsg:
    """Parse a frame the agent sent; raises pydantic.ValidationError on anything else."""
    return _agent_adapter.validate_json(text)


def decode_server(text: str | bytes) -> ServerMsg:
    """Parse a frame the server sent; raises pydantic.ValidationError on anything else."""
    return _server_adapter.validate_json(text)


#: The ``type`` of every message an agent may send (what ``decode_agent`` knows).
AGENT_TYPES: frozenset[str] = frozenset(
    m.model_fields["type"].default for m in typing.get_args(AgentMsg)
)


def encode(msg: _Msg) -> str:
    return msg.model_dump_json()
