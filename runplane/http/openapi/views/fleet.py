"""The response models of nodes, grants, join tokens and identity (tokens, sessions,
orgs, audit)."""

from __future__ import annotations

from typing import Any

from pydantic import RootModel

from .base import Number, View

# -- nodes ------------------------------------------------------------------------------


class Node(View):
    id: str
    name: str | None = None
    disabled: bool | None = None
    tier: str | None = None
    status: str | None = None
    agent_version: str | None = None
    channel: str | None = None
    cpu_cores: Number | None = None
    ram_gb: Number | None = None
    gpus: int | None = None
    used_cpu: Number | None = None
    used_ram: Number | None = None
    used_gpu: Number | None = None
    running_jobs: list[dict[str, Any]] = []
    last_heartbeat: str | None = None
    max_vram_gb: Number | None = None
    gpu_models: list[dict[str, Any]] = []
    arch: str | None = None
    os: str | None = None
    max_concurrency: int | None = None
    dlperf: Number | None = None
    reputation: Number | None = None
    reliability: Number | None = None
    active_jobs: int | None = None
    #: whether the agent applies its channel's target by itself, and how its last
    #: self-update went (docs/agent.md#self-update)
    auto_update: bool | None = None
    update: dict[str, Any] | None = None
    #: a container node's image cache: {digests, free_bytes, limit_bytes}
    #: (docs/containers.md#placement); null for a node that runs no images
    images: dict[str, Any] | None = None


class NodePage(View):
    items: list[Node]
    next_cursor: str
    has_more: bool


class NodePatchResult(View):
    id: str
    name: str | None = None
    disabled: bool | None = None
    cpu_cores: Number | None = None
    ram_gb: Number | None = None
    max_concurrency: int | None = None


class NodeSample(View):
    ts: int
    cpu: Number | None = None
    ram: Number | None = None
    gpu: Number | None = None
    jobs: int | None = None
    load: Number | None = None


class NodeMetrics(View):
    node_id: str
    window: str
    samples: list[NodeSample]
    #: what the node reports (before overrides)
    max_cpu: int | None = None
    max_ram: int | None = None
    max_gpu: int | None = None
    max_slots: int | None = None


class NodeUpdateResult(View):
    node_id: str
    update_sent: bool
    up_to_date: bool | None = None
    current_version: str | None = None
    target_version: str | None = None
    note: str | None = None
    channel: str | None = None
    auto_update: bool | None = None


class NodeGrantView(View):
    id: str
    owner_org: str | None = None
    grantee_org: str
    selector: dict[str, Any] = {}
    created_by: str | None = None
    created_at: str | None = None
    expires_at: str | None = None


class NodeGrantList(View):
    """The grants an org issued and those it received (the admin token: all, as issued)."""

    issued: list[NodeGrantView] = []
    received: list[NodeGrantView] = []


class JoinTokenMint(View):
    id: str
    token: str
    tier: str | None = None
    note: str | None = None


class JoinTokenView(View):
    id: str
    tier: str | None = None
    revoked: bool | None = None
    org_id: str | None = None
    label: str | None = None
    created_at: str | None = None


# -- identity ---------------------------------------------------------------------------


class Principal(View):
    kind: str
    subject: str | None = None
    org_id: str | None = None
    name: str | None = None
    scopes: list[str] = []
    role: str | None = None
    #: the admin token (and an open deploy's anonymous caller): sees every org
    superuser: bool | None = None


class Role(View):
    name: str
    scopes: list[str]


class MintResult(View):
    id: str
    token: str
    kind: str | None = None
    subject: str | None = None
    scopes: list[str] = []
    org_id: str | None = None
    role: str | None = None
    note: str | None = None


class TokenView(View):
    id: str
    kind: str | None = None
    subject: str | None = None
    revoked: bool | None = None
    org_id: str | None = None
    name: str | None = None
    role: str | None = None
    scopes: list[str] = []
    created_at: str | None = None


class SessionResult(View):
    session_token: str
    expires_at: str | None = None
    user_id: str | None = None
    org_id: str | None = None
    role: str | None = None
    scopes: list[str] = []
    note: str | None = None


class Org(View):
    id: str
    name: str | None = None
    kind: str | None = None
    slug: str | None = None
    created_at: str | None = None


class OrgMember(View):
    user_id: str
    role: str
    name: str | None = None
    email: str | None = None
    joined_at: str | None = None


class OrgMembership(View):
    """One org of the caller and its role there."""

    org: Org
    role: str


class User(View):
    id: str
    email: str
    name: str | None = None
    status: str | None = None
    created_at: str | None = None


class Seated(View):
    """A seated user (``POST /v1/auth/seat``): its login token is shown once (None when
    the email already had an account)."""

    user: User
    org_id: str
    login_token: str | None = None
    note: str | None = None


class MemberAdded(View):
    user: User
    role: str
    login_token: str | None = None
    note: str | None = None


class AuditRow(View):
    id: str
    action: str
    created_at: str | None = None
    org_id: str | None = None
    actor_type: str | None = None
    actor_id: str | None = None
    resource_type: str | None = None
    resource_id: str | None = None
    after: Any = None
    ip: str | None = None


class Entitlements(View):
    principal: Principal
    org: str
    usage: dict[str, Any]
    limits: dict[str, Any]
    remaining: dict[str, Any]


class JobAnalytics(View):
    window: str
    buckets: list[dict[str, Any]]
    summary: dict[str, int]


class ShareRunning(View):
    jobs: int
    cpu_cores: float
    ram_gb: float
    gpus: int


class OrgShare(View):
    """One org's fair-share standing (docs/placement.md "Fair share")."""

    org_id: str
    weight: float
    #: its dominant-resource share now (0-1)
    share: float
    dominant_resource: str
    #: decayed usage history plus the current share's start charge (share-seconds)
    usage: float
    #: usage over weight: the org with the lowest goes next
    weighted_usage: float
    running: ShareRunning
    waiting_jobs: int


class FairShareView(View):
    half_life_sec: float
    orgs: list[OrgShare]


class ChannelTargets(RootModel[dict[str, str]]):
    """Each channel's target agent version (``stable``, ...)."""


class Deleted(View):
    """What a DELETE answers with a body: the id it removed (or revoked)."""

    deleted: str | None = None
    revoked: str | None = None
