"""The lean lanes of the two submit routes, ``POST /v1/jobs`` and ``POST /v1/jobs/batch``:
each route's own work (``submitted``, ``batch_submitted``) behind a :class:`JsonLane`."""

from __future__ import annotations

from typing import Any

from quart_trio import QuartTrio

from runplane.auth.audit import By
from runplane.http.context import Services
from runplane.http.routes.arrays import batch_submitted
from runplane.http.routes.jobs import submitted
from runplane.jobs.arrays import fast_batch

from .json_lane import Caller, JsonLane
from .lanes import LeanLanes


async def _submit(svc: Services, body: Any, caller: Caller) -> tuple[dict[str, Any], int]:
    return await submitted(svc, body, By(caller.principal, caller.remote), None)


async def _batch(svc: Services, body: Any, caller: Caller) -> tuple[dict[str, Any], int]:
    return await batch_submitted(svc, body, By(caller.principal, caller.remote), None)


def install(app: QuartTrio, lanes: LeanLanes) -> None:
    JsonLane(app, "jobs.submit", _submit).install(lanes)
    JsonLane(app, "arrays.submit_batch", _batch, fast=fast_batch).install(lanes)
