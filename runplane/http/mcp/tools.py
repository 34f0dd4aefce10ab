"""The MCP tools (spec "MCP tool facade"): each is one route of the API, called with the
caller's own credential, so scopes, tenancy and admission apply exactly as they do there.

A route is a tool when its declaration says so: ``@doc(..., mcp=Tool(...))`` names the
tool, its arguments' pydantic model (its ``inputSchema`` is that model's JSON Schema) and
its annotations (read-only, destructive, idempotent). The method and the path come from
the route itself (:func:`runplane.http.openapi.route_doc.tools_of` walks the app's
routes): the arguments named like the path's parameters fill the path; the others are a
GET's query parameters (those left None dropped) or a POST's JSON body (as given; none
when the arguments are only the path's).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field


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
    """An MCP tool, declared on its route."""

    name: str
    title: str
    description: str
    args: type[BaseModel]
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


_PARAM = re.compile(r"<(?:[a-z_]+:)?(\w+)>")


@dataclass(frozen=True, slots=True)
class RouteTool:
    """A tool with the route that declares it: its method and its url rule."""

    tool: Tool
    method: str
    rule: str

    def path(self, args: BaseModel) -> str:
        return _PARAM.sub(lambda m: quote(str(getattr(args, m.group(1))), safe=""), self.rule)

    def _in_path(self) -> set[str]:
        return set(_PARAM.findall(self.rule))

    def query(self, args: BaseModel) -> dict[str, Any] | None:
        """A GET's query parameters: the arguments not in the path, those left None
        dropped."""
        if self.method != "GET":
            return None
        found = args.model_dump(exclude=self._in_path())
        return {k: v for k, v in found.items() if v is not None}

    def body(self, args: BaseModel) -> Any:
        """Another method's JSON body: the arguments not in the path, as given; none when
        the path takes them all."""
        if self.method == "GET" or not set(self.tool.args.model_fields) - self._in_path():
            return None
        return args.model_dump(exclude=self._in_path(), exclude_unset=True, mode="json")
