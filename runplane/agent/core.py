"""What the agent's three parts share (``docs/agent.md``, The agent's parts): the reports
waiting to be sent (:class:`~runplane.agent.outbox.Outbox`, with the finishes kept on
disk until acknowledged), the attempts running here, whether a connection is up, a drain
in progress, and one notifier every part waits on.

The parts: the session (``session.py``: the connection, hello/resume, reconnects and
failover), the job runner (``runner.py``: plan -> prepare -> execute -> outputs ->
finish) and the lifecycle (``lifecycle.py``: drain, self-update); ``client.py`` wires
them into :class:`~runplane.agent.client.Agent`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
import trio_websocket

from runplane.agent.finish_store import FinishStore
from runplane.agent.freeze import FreezeWatch
from runplane.agent.isolation import JobUser
from runplane.agent.jobref import JobKey
from runplane.agent.outbox import Outbox
from runplane.agent.protocol import Facts, Heartbeat, ImageFacts, JobFinished, RunningJob

#: A heartbeat carries the image cache again once its digests changed, or its free bytes
#: moved by more than this share of its limit (the disk under it fills and empties).
IMAGES_FREE_SLACK = 0.01


def images_changed(now: ImageFacts, sent: ImageFacts | None) -> bool:
    """Whether the server should hear of the image cache again."""
    if sent is None or (now.digests, now.limit_bytes) != (sent.digests, sent.limit_bytes):
        return True
    return abs(now.free_bytes - sent.free_bytes) > now.limit_bytes * IMAGES_FREE_SLACK


class Changed:
    """Wake everyone waiting for *some* state change (they re-check their own condition)."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = trio.Event()

    async def wait(self) -> None:
        await self._event.wait()


class Stop:
    """A cancel request (a ``trio.Event``'s face) and the grace before SIGKILL it asks
    for (None: the agent's ``--grace``; a preemption's own, docs/placement.md)."""

    __slots__ = ("_event", "grace")

    def __init__(self) -> None:
        self._event = trio.Event()
        self.grace: float | None = None

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()

    def set(self) -> None:
        self._event.set()


@dataclass(eq=False, slots=True)
class Job:
    """One attempt running on this node."""

    job_id: str
    attempt: int
    workdir: Path
    cancel: Stop = field(default_factory=lambda: Stop())
    running_sent: bool = False
    finished: bool = False
    pids: set[int] = field(default_factory=set)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    #: stopped by a drain: handed back to the server instead of reported cancelled
    handed_back: bool = False
    #: its streams directory, once made (``streams.py``)
    streams: Path | None = None
    #: org secret values to mask in its reports (``mask.py``), longest first
    mask: tuple[str, ...] = ()
    #: who its processes run as: its own uid (``uids.py``), the one job user, or None
    user: JobUser | None = None
    #: the freeze generation when it was accepted (``freeze.py``)
    generation: int = 0

    @property
    def key(self) -> JobKey:
        return (self.job_id, self.attempt)


@dataclass(slots=True)
class Drain:
    """A drain in progress: running jobs are handed back at ``deadline`` (trio time), or
    at once when ``now`` is set (a second stop request)."""

    timeout: float
    deadline: float
    now: trio.Event = field(default_factory=trio.Event)
    #: False once the server showed it does not know ``draining`` (an older server)
    server_drains: bool = True


@dataclass(slots=True)
class Connection:
    """One connection, from its welcome to its end."""

    ws: trio_websocket.WebSocketConnection
    heartbeat_sec: float
    closing: bool = False
    failure: BaseException | None = None
    draining_sent: bool = False
    #: the server said ``resume`` (reports resent, numbering on)
    resumed: trio.Event = field(default_factory=trio.Event)
    #: the freeze generation when it began (``freeze.py``)
    generation: int = 0


class Core:
    """The state the parts share; each part reads it and says what it changed."""

    def __init__(self, data_dir: Path, name: str | None) -> None:
        self.outbox = Outbox()
        self.freeze = FreezeWatch()
        #: ``job_finished`` messages kept on disk until the server acknowledges them
        self.finishes = FinishStore(data_dir / "outbox")
        self.changed = Changed()
        self.stop = trio.Event()
        self.jobs: dict[JobKey, Job] = {}
        #: a session is up (while it is, reporting a job waits for room: back-pressure)
        self.connected = False
        self.drain: Drain | None = None
        self.facts: Facts | None = None
        self.node_id: str | None = None
        self.name = name
        #: a container node's image cache as it is now (``images/store.py``); None: none
        self.image_facts: Callable[[], ImageFacts] | None = None
        #: the image cache as the server last heard of it (hello, heartbeat)
        self.images_sent: ImageFacts | None = None

    def notify(self) -> None:
        self.changed.notify()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self.changed.wait()

    def finish(self, msg: JobFinished) -> None:
        """Report an attempt's end (kept on disk until acknowledged)."""
        self.finishes.save(msg)
        self.outbox.put(msg)
        self.notify()

    def held_keys(self) -> list[JobKey]:
        """Running attempts and finished ones whose finish is not acknowledged yet."""
        keys = list(self.jobs)
        keys.extend(k for k in self.outbox.unacked() if k not in self.jobs)
        return keys

    def hello_facts(self) -> Facts:
        """The facts a hello says: with the image cache as it is now, on a container node."""
        assert self.facts is not None
        if self.image_facts is None:
            return self.facts
        self.images_sent = self.image_facts()
        return self.facts.model_copy(update={"images": self.images_sent})

    def heartbeat(self) -> Heartbeat:
        """A heartbeat: the attempts held, and the image cache when it changed since the
        server last heard of it (:func:`images_changed`)."""
        images = self.image_facts() if self.image_facts is not None else None
        if images is None or not images_changed(images, self.images_sent):
            return Heartbeat(running=self.held())
        self.images_sent = images
        return Heartbeat(running=self.held(), images=images)

    def held(self) -> list[RunningJob]:
        return [RunningJob(job_id=j, attempt=a) for j, a in self.held_keys()]

    def node_name(self) -> str:
        if self.facts is not None:
            return self.facts.name
        return self.name or self.node_id or "?"

    def cancel_jobs(self) -> None:
        for job in self.jobs.values():
            job.cancel.set()
