"""The job actor's messages (``runplane/actors/job.py``): what placement, the agents'
connections, the routes and the job's own timers send it, and its answers. An agent's
report travels as the protocol model it arrived as (``runplane/agent/protocol.py``), with
the node whose session it came from."""

from __future__ import annotations

from dataclasses import dataclass

from runplane.agent import protocol as p
from runplane.jobs.phase import Phase
from runplane.runtime import ActorKind, Asks, Ring
from runplane.streams.acks import AckKey, Pending
from runplane.streams.chunks import StreamChunk


@dataclass(frozen=True, slots=True)
class Assign(Asks["AssignAnswer"]):
    """Placement hands the job to ``node_id``; a gang: every rank's node (``node_id``
    first) and the port its rank 0 listens on (docs/jobs.md "Multi-node jobs")."""

    node_id: str
    ranks: tuple[str, ...] = ()
    master_port: int | None = None


@dataclass(frozen=True, slots=True)
class AgentPhase:
    """The agent's ``job_phase`` report (``pulling`` with the attempt's GPU devices, or
    ``running``), as it came from ``node_id``."""

    node_id: str
    report: p.JobPhase

    @property
    def attempt(self) -> int:
        return self.report.attempt

    @property
    def phase(self) -> Phase:  # PULLING | RUNNING
        return Phase(self.report.phase)

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(self.report.gpus)


@dataclass(frozen=True, slots=True)
class AgentLogs:
    """The agent's ``job_logs`` report: lines are (stream, line), or (stream, line,
    service) for a line of a pod's service; ``n`` is the agent's number of this report in
    the attempt (None: an agent that does not number them), one already stored is a
    resent duplicate."""

    node_id: str
    report: p.JobLogs

    @property
    def attempt(self) -> int:
        return self.report.attempt


@dataclass(frozen=True, slots=True)
class AgentMetric:
    """The agent's ``job_metric`` report (numbered as ``AgentLogs``)."""

    node_id: str
    report: p.JobMetric

    @property
    def attempt(self) -> int:
        return self.report.attempt


@dataclass(frozen=True, slots=True)
class AgentFinished(Asks[bool]):
    """The agent's ``job_finished`` report: the outcome (a terminal phase), the final
    metrics, the ArtifactRefs of the outputs it uploaded (checked before they are
    recorded), how the process ended (exit code, or the signal's name)."""

    node_id: str
    report: p.JobFinished

    @property
    def attempt(self) -> int:
        return self.report.attempt

    @property
    def outcome(self) -> Phase:
        return Phase(self.report.outcome)


@dataclass(frozen=True, slots=True)
class LoseAttempt:
    attempt: int
    reason: str


@dataclass(frozen=True, slots=True)
class OrderUndelivered:
    """The run order of ``attempt`` did not reach the node (sent to self), or the node
    declined it before running anything (``counted`` False: not the node's loss)."""

    attempt: int
    reason: str
    counted: bool = True


@dataclass(frozen=True, slots=True)
class Cancel(Asks["CancelOutcome"]):
    pass


@dataclass(frozen=True, slots=True)
class Preempt(Asks[bool]):
    """Placement stops the job for waiting job ``by`` (docs/placement.md "Preemption"):
    SIGTERM, SIGKILL after ``grace_sec``; once its process ended it goes back to the
    queue. False: it is not on a node (nothing to stop)."""

    by: str
    grace_sec: int


@dataclass(frozen=True, slots=True)
class SetPriority(Asks[bool]):
    priority: int


@dataclass(frozen=True, slots=True)
class WaitReason:
    """Placement's reason why the queued job waits, told when it changed: stored as a
    ``phase`` event carrying ``reason`` (and on the row), unless the job has it already."""

    reason: str


@dataclass(frozen=True, slots=True)
class BackoffOver:
    """The backoff of retry number ``retries`` is over (sent to self by its timer)."""

    retries: int


@dataclass(frozen=True, slots=True)
class AgentStream:
    """The agent's ``job_stream`` report: chunks of one stream the job wrote, in order."""

    node_id: str
    report: p.JobStream

    @property
    def attempt(self) -> int:
        return self.report.attempt


@dataclass(frozen=True, slots=True)
class OpenStream(Asks[Ring[StreamChunk] | None]):
    """The replay ring of one of the job's streams; None once the job is terminal."""

    stream: str


@dataclass(frozen=True, slots=True)
class SendTeleop(Asks["TeleopOrder"]):
    """Number a teleop frame (compact JSON text) and send it to the job's node."""

    stream: str
    frame: str


@dataclass(frozen=True, slots=True)
class TeleopOrder:
    """What became of a teleop frame: ``not_live`` (409) says why the run cannot take it;
    else ``sent`` tells whether the node's connection took it, and ``pending`` waits for
    the agent's confirmation."""

    not_live: str | None = None
    sent: bool = False
    seq: int = 0
    key: AckKey | None = None
    pending: Pending | None = None


JobMsg = (
    Assign
    | AgentPhase
    | AgentLogs
    | AgentMetric
    | AgentFinished
    | LoseAttempt
    | OrderUndelivered
    | Cancel
    | Preempt
    | SetPriority
    | WaitReason
    | BackoffOver
    | AgentStream
    | OpenStream
    | SendTeleop
)

#: The job actors, one per live job, addressed by job id in the registry.
JOBS = ActorKind[JobMsg]("job")


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    cancelled: bool
    killed_on_node: bool


@dataclass(frozen=True, slots=True)
class AssignAnswer:
    """``taken``: the job is now assigned to the node. Refused, ``on_node`` names the node
    the job already holds (an assignment of a placement incarnation that crashed won the
    race), so the placer counts that reservation instead of releasing it."""

    taken: bool
    on_node: str | None = None
