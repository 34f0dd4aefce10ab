"""Who is calling, as far as tenancy goes.

Until the auth layer lands (the tenancy issue) every caller is the anonymous caller of an
open deploy: it sees every org (the spec: "an anonymous caller in a deploy whose auth mode
is off sees everything") and creates in ``org_default``.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_ORG = "org_default"


@dataclass(frozen=True, slots=True)
class Caller:
    subject: str
    org_id: str  # where what it creates lands
    read_org: str | None  # reads are narrowed to this org; None = every org


def current_caller() -> Caller:
    return Caller(subject="anonymous", org_id=DEFAULT_ORG, read_org=None)
