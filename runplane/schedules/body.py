"""The schedule bodies (docs/schedules.md): create and PATCH."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, StringConstraints

from runplane.pipelines.body import PipelineBody
from runplane.runs.spec import RunSpecBody

Name = Annotated[str, StringConstraints(min_length=1, max_length=256)]
Concurrency = Literal["allow", "forbid", "replace"]
#: Most schedules one org may have.
MAX_PER_ORG = 1000


class ScheduleBody(BaseModel):
    """Exactly one of ``cron`` (5 fields, in ``timezone``) and ``every`` (``30s``, ``5m``,
    ``1h30m``, ``2d``); exactly one of ``job`` (a RunSpecBody) and ``pipeline``."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    cron: Annotated[str, StringConstraints(max_length=256)] | None = None
    every: Annotated[str, StringConstraints(max_length=32)] | None = None
    timezone: Annotated[str, StringConstraints(min_length=1, max_length=64)] = "UTC"
    job: RunSpecBody | None = None
    pipeline: PipelineBody | None = None
    concurrency: Concurrency = "allow"
    suspend: bool = False


class SchedulePatch(BaseModel):
    """Any field of ScheduleBody; ``cron`` replaces ``every`` and the other way round, and
    ``job`` replaces ``pipeline`` likewise."""

    model_config = ConfigDict(extra="forbid")

    name: Name | None = None
    cron: Annotated[str, StringConstraints(max_length=256)] | None = None
    every: Annotated[str, StringConstraints(max_length=32)] | None = None
    timezone: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None
    job: RunSpecBody | None = None
    pipeline: PipelineBody | None = None
    concurrency: Concurrency | None = None
    suspend: bool | None = None
