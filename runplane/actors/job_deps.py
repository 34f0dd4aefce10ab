"""What a job actor talks to (``runplane/actors/job.py``), injected so it knows no HTTP
and no socket: the store and hub, the node deliveries, placement's hooks, the run order's
makers, and the hooks of the services that follow a job's phase (``Root._wire`` builds
it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from runplane.agent import protocol as p
from runplane.jobs.jobspec import JobSpec
from runplane.jobs.phase import JobState, Phase
from runplane.jobs.rows import JobRow
from runplane.nodes.status import AttemptOutcome
from runplane.persistence import Store
from runplane.runtime import Hub
from runplane.streams.acks import TeleopAcks
from runplane.streams.chunks import DEFAULT_RING


async def _no_phase_hook(row: JobRow, phase: Phase) -> None:
    return None


async def _no_stage_hook(
    row: JobRow, phase: str, error: str | None, final_metrics: dict[str, float]
) -> None:
    return None


async def _nothing() -> dict[str, str]:
    return {}


@dataclass(frozen=True, slots=True)
class JobDeps:
    """What a job actor talks to, injected so it knows no HTTP and no socket."""

    store: Store
    hub: Hub
    #: deliver a protocol message to a node's agent; True when handed to a live connection
    deliver: Callable[[str, p.Run | p.Cancel | p.Teleop], Awaitable[bool]]
    #: placement hooks
    enqueue: Callable[[JobRow], Awaitable[None]]
    dequeue: Callable[[str], Awaitable[None]]
    release: Callable[[str], Awaitable[None]]
    reprioritize: Callable[[str, int], Awaitable[None]]
    #: the node lost (or finished) an attempt: reliability counters
    node_outcome: Callable[[str, AttemptOutcome], Awaitable[None]]
    #: build the agent's run order for (job row, attempt, git auth, org secret values,
    #: more values to mask)
    run_order: Callable[[JobRow, int, dict[str, str], dict[str, str], list[str]], p.Run]
    cancel_order: Callable[[str, int], p.Cancel]
    #: the credentials a job's mounts fetch git connections' repositories with through the
    #: server (connection id -> Authorization header with the attempt's ticket), made when
    #: its run order is built (docs/git.md)
    mount_auth: Callable[[JobRow, int], Awaitable[dict[str, str]]] = lambda row, attempt: _nothing()
    #: the values of the org secrets a job's env references, read when its run order is
    #: built (docs/secrets.md; never stored with the job)
    env_secrets: Callable[[JobRow], Awaitable[dict[str, str]]] = lambda row: _nothing()
    #: the job's spec with its sealed plain env values opened, and those values (to
    #: mask), for the run order (runplane/sealed_env.py; never stored opened)
    open_spec: Callable[[JobRow], tuple[JobSpec, list[str]]] = lambda row: (row.spec, [])
    #: the job's phase changed (durably): the admission ledger counts live work by it
    phase_changed: Callable[[JobRow, Phase], Awaitable[None]] = _no_phase_hook
    #: a pipeline stage job's phase changed (durably): (row, phase, error, final metrics)
    #: for its pipeline actor (``runplane/actors/pipeline.py``)
    stage_changed: Callable[[JobRow, str, str | None, dict[str, float]], Awaitable[None]] = (
        _no_stage_hook
    )
    #: a session's pod job's phase changed (durably), for its session actor
    #: (``runplane/actors/session.py``); the same arguments
    session_changed: Callable[[JobRow, str, str | None, dict[str, float]], Awaitable[None]] = (
        _no_stage_hook
    )
    #: the run ended: the part of the transaction storing its end that queues its
    #: webhook deliveries, or None (``runplane/services/webhooks.py`` ``end_tx``)
    end_tx: Callable[
        [JobRow, JobState, dict[str, float], list[dict[str, Any]]], Callable[[Any], Any] | None
    ] = lambda row, state, metrics, artifacts: None
    #: the job's phase changed: a part of the transaction storing it (the commit status of
    #: a run from a git connection, ``runplane/services/git.py`` ``status_tx``), or None
    phase_tx: Callable[[JobRow, JobState], Callable[[Any], Any] | None] = lambda row, state: None
    #: streams: the kind of each stream a stack declares (stack name -> {name: kind}),
    #: chunks a stream's ring keeps, and teleop frames waiting for their agent
    stream_kinds: Callable[[str], dict[str, str]] = lambda stack: {}
    stream_ring: int = DEFAULT_RING
    teleop_acks: TeleopAcks = field(default_factory=TeleopAcks)
    #: the server's stream counters (runplane/services/streams.py ``Streams.counters``)
    stream_counters: dict[str, int] = field(default_factory=dict)
