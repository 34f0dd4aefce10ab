"""Problems: the errors that become RFC 9457 bodies, raised by domain code and routes alike.

Domain modules (jobs, nodes, ...) raise ``Problem`` without knowing about HTTP; the HTTP
layer renders it (``runplane/http/problems.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class FieldProblem:
    """One validation problem; the spec's RunProblem {key, code, message}."""

    key: str
    code: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"key": self.key, "code": self.code, "message": self.message}


@dataclass(eq=False)
class Problem(Exception):
    """Raise from a route (or anything it calls) to answer with a problem body."""

    status: int
    code: str
    detail: str
    errors: list[FieldProblem] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.detail}"


def not_found(what: str = "resource") -> Problem:
    """The 404 for unknown ids and other orgs' ids alike: the body must not tell them apart."""
    return Problem(404, "not_found", f"{what} not found")
