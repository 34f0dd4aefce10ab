"""Who is calling, as far as tenancy goes: the one place routes ask.

The auth layer (``runplane/http/auth_hook.py``) resolves every request to a principal before the
route runs; :func:`current_caller` gives routes its tenancy view:

- ``org_id``: where what the caller creates lands (its token's or session's org; the
  anonymous caller and the admin token create in ``org_default``);
- ``read_org``: the org reads are narrowed to; ``None`` = every org (the admin token, and
  the anonymous caller of an open deploy: the spec's "sees everything"). An id of another
  org must then answer the same 404 as an unknown id.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runplane.auth.principal import DEFAULT_ORG, Principal
from runplane.http.auth_hook import current_principal
from runplane.http.query import str_arg
from runplane.problems import FieldProblem, Problem

__all__ = ["DEFAULT_ORG", "Caller", "current_caller", "write_org"]


@dataclass(frozen=True, slots=True)
class Caller:
    subject: str
    org_id: str  # where what it creates lands
    read_org: str | None  # reads are narrowed to this org; None = every org
    principal: Principal | None = field(default=None, compare=False)

    @property
    def superuser(self) -> bool:
        return self.principal is not None and self.principal.superuser


def current_caller() -> Caller:
    principal = current_principal()
    return Caller(
        subject=principal.subject,
        org_id=principal.org_id,
        read_org=principal.read_org,
        principal=principal,
    )


def write_org(what: str) -> str:
    """The org a write is for: the caller's, or the one the admin token names with
    ``?org=`` (a 400 naming ``org`` when it names none); ``what`` says what is written
    ("secret", "credential")."""
    caller = current_caller()
    if not caller.superuser:
        return caller.org_id
    org = str_arg("org")
    if org is None:
        message = f"the admin token names the org whose {what} this is: ?org=<org id>"
        raise Problem(400, "missing_field", message, [FieldProblem("org", "missing", message)])
    return org
