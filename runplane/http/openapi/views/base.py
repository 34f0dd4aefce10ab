"""The base of the response models (a View allows fields it does not name), the job
phases, and the problem body."""

from __future__ import annotations

from typing import Literal

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
    #: the RunSpec layer that set the offending key (when one did)
    layer: str | None = None


class ProblemDetails(View):
    """RFC 9457 problem details, the body of every error (``application/problem+json``)."""

    type: str
    title: str
    status: int
    detail: str
    code: str
    errors: list[RunProblem] | None = None
    request_id: str | None = None
