"""The pipeline submit body (spec "Pipelines": PipelineBody, PipelineStageBody)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from runplane.runs.spec import RunSpecBody

#: Most stages one pipeline may have.
MAX_STAGES = 1000
#: Most stages one stage may need.
MAX_NEEDS = 1000


class PipelineStageBody(RunSpecBody):
    """Every RunSpecBody field, plus the stage's ``name``, the stages it ``needs`` and
    ``allow_failure``. Names are checked with the topology (an empty or duplicate name is
    a 400 naming the stage), so the model accepts any string here."""

    name: Annotated[str, StringConstraints(max_length=128)] = ""
    needs: Annotated[list[str], Field(max_length=MAX_NEEDS)] = []
    allow_failure: bool = False


class PipelineBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stages: Annotated[list[PipelineStageBody], Field(min_length=1, max_length=MAX_STAGES)]
    name: Annotated[str, StringConstraints(max_length=256)] = ""
    project: Annotated[str, StringConstraints(max_length=128)] = ""
