"""The session submit body (spec "Sessions and pods": SessionBody, PodService, PodHealth)
and the pod's topology check (``runplane/dag.py``: service names unique, ``needs`` known,
no cycle)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from runplane import dag
from runplane.images import reference
from runplane.problems import FieldProblem, Problem

#: Most services one pod may have.
MAX_SERVICES = 32
#: A stream name (as the streams routes take it).
STREAM_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
ServiceName = Annotated[str, StringConstraints(max_length=64)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PodHealth(_Strict):
    """A health gate: ``command`` run in the pod every ``period_sec`` (each try stopped
    after ``timeout_sec``) until it exits 0; past ``retries`` failed tries the session
    fails."""

    command: Annotated[list[str], Field(min_length=1)]
    period_sec: Annotated[int, Field(ge=1, le=3600)] = 2
    timeout_sec: Annotated[int, Field(ge=1, le=3600)] = 5
    retries: Annotated[int, Field(ge=0, le=10_000)] = 30


class PodService(_Strict):
    name: ServiceName
    #: an image wins over the stack's: resolved to a digest at submit, the service runs
    #: in it (docs/containers.md)
    image: Annotated[str, StringConstraints(max_length=reference.MAX_REFERENCE)] | None = None
    stack: Annotated[str, StringConstraints(max_length=256)] | None = None
    command: list[str] | None = None
    env: dict[str, str] = {}
    needs: list[str] = []
    health: PodHealth | None = None
    cpu_cores: Annotated[int, Field(ge=0)] = 0
    ram_gb: Annotated[int, Field(ge=0)] = 0
    gpu_count: Annotated[int, Field(ge=0)] = 0

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        return reference.check(value)


class Pod(_Strict):
    services: Annotated[list[PodService], Field(min_length=1, max_length=MAX_SERVICES)]


class SessionBody(_Strict):
    pod: Pod
    name: Annotated[str, StringConstraints(max_length=256)] = ""
    project: Annotated[str, StringConstraints(max_length=128)] = ""
    #: seconds without a keepalive before the session is reaped (the server's
    #: RUNPLANE_SESSION_IDLE_TTL_SEC when omitted)
    idle_ttl_sec: Annotated[int, Field(ge=2, le=7 * 24 * 3600)] | None = None
    actions: Annotated[list[dict[str, Any]], Field(max_length=100)] = []
    #: the data stream that drives the pod (teleop frames reach ``/streams/<name>.teleop``)
    teleop_stream: Annotated[str, Field(pattern=STREAM_NAME)] = "control"


def check_pod(pod: Pod) -> list[int]:
    """The services' start order; a 400 naming the services when the pod's ``needs`` do not
    form a valid DAG (empty or duplicate names, unknown needs, a cycle)."""
    graph = dag.check(pod.services, prefix="pod.services", what="service")
    if graph.ok:
        return graph.order
    problems: list[FieldProblem] = graph.problems
    first = problems[0].message
    more = "" if len(problems) == 1 else f" (and {len(problems) - 1} more)"
    raise Problem(400, "invalid_pod", first + more, problems)


#: Most ids one batch keepalive (``POST /v1/sessions/keepalive``) may name.
KEEPALIVE_BATCH_MAX = 1000


class KeepaliveBatchBody(_Strict):
    """``POST /v1/sessions/keepalive``: the sessions to keep alive, at most
    :data:`KEEPALIVE_BATCH_MAX` ``ses_`` ids (a repeated id counts once; checked by the
    sessions service's ``batch_ids``)."""

    ids: list[str]
