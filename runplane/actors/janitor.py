"""The retention janitor: one supervised actor that, every period, deletes what finished
jobs no longer need once they are older than the retention (``RUNPLANE_RETENTION_DAYS``,
default 30; an org's policy document may set its own ``retention_days``; 0 keeps forever).

A sweep takes the oldest expired jobs a hundred at a time and, for each, deletes its log
lines and metric points, its stream points (``runplane/jobs/retention.py``, at most
``DELETE_CHUNK`` rows per transaction, so submits and job transitions interleave with the
deletes in the writer) and its artifacts, then stamps the row's ``purged_at``. The row, its
phase events and final metrics stay; a deleted artifact answers 410. A sweep restarted
after a crash finds what is left (the stamp comes last).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import trio

from runplane.artifacts import ArtifactStore
from runplane.jobs import repo as jobs_repo
from runplane.jobs import retention
from runplane.persistence import Store
from runplane.policy import repo as policy_repo
from runplane.runtime import Actor, Asks, clock
from runplane.streams import job_streams

log = logging.getLogger("runplane.retention")

#: Seconds between sweeps (the first comes this long after start).
SWEEP_SEC = 300.0
#: Jobs read per query of a sweep.
BATCH_JOBS = 100


@dataclass(frozen=True, slots=True)
class Sweep:
    """Time for a sweep (sent to self)."""


@dataclass(frozen=True, slots=True)
class SweepNow(Asks["Swept"]):
    """Sweep now and answer what was deleted (operators and tests)."""


@dataclass(slots=True)
class Swept:
    jobs: int = 0
    events: int = 0
    stream_points: int = 0
    artifacts: int = 0
    seconds: float = 0.0
    #: days per org with an override (the rest use the deployment's)
    overrides: dict[str, int] = field(default_factory=dict)


JanitorMsg = Sweep | SweepNow


class Janitor(Actor[JanitorMsg]):
    def __init__(
        self,
        store: Store,
        artifacts: ArtifactStore | None,
        days: int,
        *,
        period: float = SWEEP_SEC,
    ) -> None:
        self.store = store
        self.artifacts = artifacts
        self.days = days
        self.period = period

    async def on_start(self) -> None:
        self.context.tell_after(self.period, Sweep())

    async def handle(self, msg: JanitorMsg) -> object:
        if isinstance(msg, Sweep):
            self.context.tell_after(self.period, Sweep())
        swept = await self.sweep()
        if swept.jobs:
            log.info(
                "retention sweep",
                extra={
                    "jobs": swept.jobs,
                    "events": swept.events,
                    "stream_points": swept.stream_points,
                    "artifacts": swept.artifacts,
                    "seconds": round(swept.seconds, 3),
                },
            )
        return swept

    async def sweep(self) -> Swept:
        began = clock.now()
        docs = await policy_repo.load_all(self.store)
        overrides = {
            org: doc.retention_days for org, doc in docs.items() if doc.retention_days is not None
        }
        swept = Swept(overrides=dict(overrides))
        now = int(clock.wall() * 1000)
        groups: list[tuple[int, str | None, tuple[str, ...]]] = []
        if self.days > 0:
            groups.append((now - self.days * retention.DAY_MS, None, tuple(overrides)))
        for org, days in sorted(overrides.items()):
            if days > 0:
                groups.append((now - days * retention.DAY_MS, org, ()))
        for cutoff, org_id, exclude in groups:
            while True:
                batch = await retention.expired(
                    self.store, cutoff, org_id=org_id, exclude=exclude, limit=BATCH_JOBS
                )
                if not batch:
                    break
                for job in batch:
                    await self._purge(job, now, swept)
        swept.seconds = clock.now() - began
        return swept

    async def _purge(self, job: retention.Expired, now: int, swept: Swept) -> None:
        swept.events += await retention.purge_events(self.store, job)
        swept.stream_points += await job_streams.purge_stream_points(
            self.store, job.id, retention.DELETE_CHUNK
        )
        if self.artifacts is not None:
            for info in await self.artifacts.list(f"{job.id}/"):
                swept.artifacts += await self.artifacts.delete(info.key)
        await jobs_repo.mark_purged(self.store, job.id, now)
        swept.jobs += 1
        await trio.lowlevel.checkpoint()
