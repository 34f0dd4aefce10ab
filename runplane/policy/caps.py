"""Policy caps: the platform layer from settings, the org/project/user refinements an org
stores, the effective policy with provenance per axis, and the admission ceilings.

Pure (no store, no trio). The layers fold platform < org < project < user: each axis takes
the value of the highest-precedence layer that set it (``EffectivePolicy``). The admission
ceilings (``effective_caps``) are that value kept within the platform's own: an org's
owner may narrow or widen its layers, but never past what the operator configured with
``RUNPLANE_MAX_*``. For the concurrency axes 0 means "no cap".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from runplane.layering import fold
from runplane.timefmt import iso_ms

RESOURCE_AXES = ("max_cpu", "max_ram", "max_gpu", "max_timeout_sec")
CONCURRENCY_AXES = ("max_concurrent_org", "max_concurrent_user")
#: preemption (docs/placement.md "Preemption"): the grace cap is a ceiling like the
#: resource axes; ``preemptible_default`` is a preference, not a ceiling: the highest layer
#: that sets it decides, whatever the platform's (an org may opt its jobs in)
PREEMPTION_AXES = ("max_preempt_grace_sec", "preemptible_default")
PREFERENCE_AXES = ("preemptible_default",)
AXES = RESOURCE_AXES + CONCURRENCY_AXES + PREEMPTION_AXES
INT32_MAX = 2**31 - 1
#: Most projects or users one policy document may refine.
MAX_ENTRIES = 1000
#: The longest retention a policy document may set (100 years; 0 keeps forever).
MAX_RETENTION_DAYS = 36500
#: The largest fair-share weight an org may have.
MAX_FAIR_SHARE_WEIGHT = 10000


class PolicyCaps(BaseModel):
    """Sparse caps: only the axes set appear; the others fall through to a lower layer."""

    model_config = ConfigDict(extra="forbid")

    max_cpu: int | None = Field(None, ge=1, le=INT32_MAX)
    max_ram: int | None = Field(None, ge=1, le=INT32_MAX)
    max_gpu: int | None = Field(None, ge=0, le=INT32_MAX)
    max_timeout_sec: int | None = Field(None, ge=1, le=INT32_MAX)
    max_concurrent_org: int | None = Field(None, ge=0, le=INT32_MAX)
    max_concurrent_user: int | None = Field(None, ge=0, le=INT32_MAX)
    max_preempt_grace_sec: int | None = Field(None, ge=1, le=86400)
    preemptible_default: bool | None = None

    def sparse(self) -> dict[str, int]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


LayerKey = Annotated[str, StringConstraints(min_length=1, max_length=128)]


class PolicyDocBody(BaseModel):
    """The PUT /v1/policy body: a PolicyDoc. ``org_id`` may be sent back as read (it must
    then name the org being written); ``updated_at`` is the server's and is ignored."""

    model_config = ConfigDict(extra="forbid")

    org_id: str | None = None
    org: PolicyCaps = PolicyCaps()
    projects: dict[LayerKey, PolicyCaps] = Field(default_factory=dict, max_length=MAX_ENTRIES)
    users: dict[LayerKey, PolicyCaps] = Field(default_factory=dict, max_length=MAX_ENTRIES)
    #: days a finished job's logs, metric points, stream points and artifacts are kept in
    #: this org (0: forever); unset: the deployment's RUNPLANE_RETENTION_DAYS (an addition,
    #: docs/operations.md "Retention")
    retention_days: int | None = Field(None, ge=0, le=MAX_RETENTION_DAYS)
    #: the org's weight in fair share between orgs (unset: 1); only the admin token may
    #: change it (docs/placement.md "Fair share")
    fair_share_weight: float | None = Field(None, gt=0, le=MAX_FAIR_SHARE_WEIGHT)
    updated_at: str | None = None


@dataclass(frozen=True, slots=True)
class PolicyDoc:
    """An org's stored refinement layers (sparse caps each)."""

    org_id: str
    org: dict[str, int] = field(default_factory=dict)
    projects: dict[str, dict[str, int]] = field(default_factory=dict)
    users: dict[str, dict[str, int]] = field(default_factory=dict)
    updated_at: int | None = None
    #: the org's retention override (None: the deployment's)
    retention_days: int | None = None
    #: the org's fair-share weight (None: 1)
    fair_share_weight: float | None = None

    @classmethod
    def from_body(cls, org_id: str, body: PolicyDocBody, now: int) -> PolicyDoc:
        def sparse(items: Mapping[str, PolicyCaps]) -> dict[str, dict[str, int]]:
            out = {name: caps.sparse() for name, caps in sorted(items.items())}
            return {name: caps for name, caps in out.items() if caps}

        return cls(
            org_id=org_id,
            org=body.org.sparse(),
            projects=sparse(body.projects),
            users=sparse(body.users),
            updated_at=now,
            retention_days=body.retention_days,
            fair_share_weight=body.fair_share_weight,
        )

    @classmethod
    def from_stored(cls, org_id: str, data: Mapping[str, Any], updated_at: int) -> PolicyDoc:
        return cls(
            org_id=org_id,
            org=dict(data.get("org") or {}),
            projects={k: dict(v) for k, v in (data.get("projects") or {}).items()},
            users={k: dict(v) for k, v in (data.get("users") or {}).items()},
            updated_at=updated_at,
            retention_days=data.get("retention_days"),
            fair_share_weight=data.get("fair_share_weight"),
        )

    @property
    def empty(self) -> bool:
        return (
            not (self.org or self.projects or self.users)
            and self.retention_days is None
            and self.fair_share_weight is None
        )

    def stored(self) -> dict[str, Any]:
        out: dict[str, Any] = {"org": self.org, "projects": self.projects, "users": self.users}
        if self.retention_days is not None:
            out["retention_days"] = self.retention_days
        if self.fair_share_weight is not None:
            out["fair_share_weight"] = self.fair_share_weight
        return out

    def view(self) -> dict[str, Any]:
        return {
            "org_id": self.org_id,
            "org": dict(self.org),
            "projects": {k: dict(v) for k, v in self.projects.items()},
            "users": {k: dict(v) for k, v in self.users.items()},
            "retention_days": self.retention_days,
            "fair_share_weight": self.fair_share_weight,
            "updated_at": iso_ms(self.updated_at) if self.updated_at else None,
        }

    def layers(self, subject: str, project: str) -> list[tuple[str, Mapping[str, int]]]:
        """The refinement layers that apply to ``subject`` submitting in ``project``."""
        return [
            ("org", self.org),
            ("project", self.projects.get(project, {}) if project else {}),
            ("user", self.users.get(subject, {}) if subject else {}),
        ]


def empty_doc(org_id: str) -> PolicyDoc:
    return PolicyDoc(org_id=org_id)


@dataclass(frozen=True, slots=True)
class EffectivePolicy:
    values: dict[str, int]
    provenance: dict[str, str]

    def view(self) -> dict[str, Any]:
        return {**{axis: self.values[axis] for axis in AXES}, "provenance": dict(self.provenance)}


def platform_caps(settings: Any) -> dict[str, int]:
    """The platform layer: every axis, from the ``RUNPLANE_MAX_*`` settings."""
    return {
        axis: (bool if axis in PREFERENCE_AXES else int)(getattr(settings, axis)) for axis in AXES
    }


def effective(
    platform: Mapping[str, int], doc: PolicyDoc | None, *, subject: str = "", project: str = ""
) -> EffectivePolicy:
    layers: list[tuple[str, Mapping[str, int]]] = [("platform", platform)]
    if doc is not None:
        layers += doc.layers(subject, project)
    folded = fold(layers)
    return EffectivePolicy(values=folded.values, provenance=folded.provenance)


def _within(axis: str, value: int, ceiling: int) -> int:
    if axis in PREFERENCE_AXES:  # not a ceiling: the layers decide
        return value
    if axis in CONCURRENCY_AXES:  # 0 = no cap
        if ceiling == 0:
            return value
        if value == 0:
            return ceiling
    return min(value, ceiling)


@dataclass(frozen=True, slots=True)
class Caps:
    """The admission ceilings for one (org, subject, project)."""

    values: dict[str, int]
    provenance: dict[str, str]  # axis -> layer whose value applies (platform when it bound)

    def __getitem__(self, axis: str) -> int:
        return self.values[axis]

    def view(self) -> dict[str, Any]:
        return {**self.values, "provenance": dict(self.provenance)}


def ceilings(eff: EffectivePolicy, platform: Mapping[str, int]) -> Caps:
    """``effective_caps``: each axis of ``eff`` kept within the platform's value."""
    values: dict[str, int] = {}
    provenance: dict[str, str] = {}
    for axis in AXES:
        value = _within(axis, eff.values[axis], platform[axis])
        values[axis] = value
        bound_by_platform = value != eff.values[axis]
        provenance[axis] = "platform" if bound_by_platform else eff.provenance[axis]
    return Caps(values=values, provenance=provenance)


def above_platform(doc: PolicyDoc, platform: Mapping[str, int]) -> list[str]:
    """Notes for caps a layer sets past the platform ceiling (which then applies)."""
    notes = []
    for where, caps in (
        [("org layer", doc.org)]
        + [(f"project {name!r}", c) for name, c in doc.projects.items()]
        + [(f"user {name!r}", c) for name, c in doc.users.items()]
    ):
        for axis, value in caps.items():
            if _within(axis, value, platform[axis]) != value:
                notes.append(
                    f"{axis} {value} in the {where} is past the platform ceiling "
                    f"{platform[axis]}; {platform[axis]} applies"
                )
    return notes
