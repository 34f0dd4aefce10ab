"""The MCP tools (spec "MCP tool facade"): each is one route of the API, called with the
caller's own credential, so scopes, tenancy and admission apply exactly as they do there.

A tool names its arguments' pydantic model (its ``inputSchema`` is that model's JSON
Schema), the route it calls, and its annotations (read-only, destructive, idempotent).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from runplane.http.routes.policy import PreflightBody
from runplane.jobs.spec import SubmitJobBody


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoArgs(_Args):
    pass


class JobArgs(_Args):
    job_id: str = Field(description="The job's id (job_...).", min_length=1, max_length=200)


class ListJobsArgs(_Args):
    phase: (
        Literal[
            "queued",
            "assigned",
            "pulling",
            "running",
            "succeeded",
            "failed",
            "timeout",
            "cancelled",
        ]
        | None
    ) = Field(None, description="Only jobs in this phase.")
    stack: str | None = Field(None, description="Only jobs of this stack.")
    limit: int = Field(20, ge=1, le=200, description="At most this many, newest first.")


class LogsArgs(JobArgs):
    stream: Literal["stdout", "stderr", "system"] | None = Field(
        None, description="Only this stream's lines."
    )
    since_seq: int = Field(0, ge=0, description="Only events after this seq (paging).")
    limit: int = Field(200, ge=1, le=1000, description="At most this many lines.")


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    title: str
    description: str
    args: type[BaseModel]
    method: str
    #: the route's path for these arguments
    path: Callable[[Any], str]
    #: the query parameters of a GET, or the JSON body of a POST, from the arguments
    query: Callable[[Any], dict[str, Any]] | None = None
    body: Callable[[Any], Any] | None = None
    read_only: bool = True
    destructive: bool = False
    idempotent: bool = True

    def listing(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.args.model_json_schema(),
            "annotations": {
                "title": self.title,
                "readOnlyHint": self.read_only,
                "destructiveHint": self.destructive,
                "idempotentHint": self.idempotent,
                "openWorldHint": False,
            },
        }


def _job(path: str = "") -> Callable[[Any], str]:
    return lambda a: f"/v1/jobs/{quote(a.job_id, safe='')}{path}"


def _dropping_none(model: BaseModel) -> dict[str, Any]:
    return {k: v for k, v in model.model_dump(exclude={"job_id"}).items() if v is not None}


TOOLS: dict[str, Tool] = {
    t.name: t
    for t in (
        Tool(
            "list_stacks",
            "List stacks",
            "The stack catalog: the environments a job can run in, with their config fields.",
            NoArgs,
            "GET",
            lambda a: "/v1/stacks",
        ),
        Tool(
            "submit_job",
            "Submit a job",
            "Submit a job (a SubmitJobBody: stack, command, config, limits, ...). Answers the "
            "job, queued; admission may refuse it (the org's concurrency limit).",
            SubmitJobBody,
            "POST",
            lambda a: "/v1/jobs",
            body=lambda a: a.model_dump(exclude_unset=True, mode="json"),
            read_only=False,
            idempotent=False,
        ),
        Tool(
            "preflight_job",
            "Preflight a job",
            "Would admission take this run now? The limits after clamping and, when not, why.",
            PreflightBody,
            "POST",
            lambda a: "/v1/policy/preflight",
            body=lambda a: a.model_dump(exclude_unset=True, mode="json"),
        ),
        Tool(
            "get_job",
            "Get a job",
            "One job: phase, node, exit code, error, final metrics, artifacts.",
            JobArgs,
            "GET",
            _job(),
        ),
        Tool(
            "list_jobs",
            "List jobs",
            "Jobs, newest first, optionally by phase or stack.",
            ListJobsArgs,
            "GET",
            lambda a: "/v1/jobs",
            query=_dropping_none,
        ),
        Tool(
            "get_logs",
            "Get a job's logs",
            "A job's log lines and metric points after since_seq; next_seq pages on.",
            LogsArgs,
            "GET",
            _job("/logs"),
            query=_dropping_none,
        ),
        Tool(
            "list_artifacts",
            "List a job's artifacts",
            "The files a job kept, with their sizes and download references.",
            JobArgs,
            "GET",
            _job("/artifacts"),
        ),
        Tool(
            "cancel_job",
            "Cancel a job",
            "Cancel a job that has not ended (it is killed on its node if running).",
            JobArgs,
            "POST",
            _job("/cancel"),
            read_only=False,
            destructive=True,
        ),
        Tool(
            "rerun_job",
            "Rerun a job",
            "Run a job again with the same spec: a new job.",
            JobArgs,
            "POST",
            _job("/rerun"),
            read_only=False,
            idempotent=False,
        ),
        Tool(
            "get_nodes",
            "List nodes",
            "The fleet: each node's status, capacity, committed load and running jobs.",
            NoArgs,
            "GET",
            lambda a: "/v1/nodes",
        ),
        Tool(
            "entitlements",
            "My entitlements",
            "Who the caller is, its org's usage and limits, and what remains.",
            NoArgs,
            "GET",
            lambda a: "/v1/me/entitlements",
        ),
    )
}
