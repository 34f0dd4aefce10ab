"""Policy routes: the org's policy document, its preview, and admission preflight.

``GET|PUT /v1/policy`` and ``/v1/policy/preview`` are Manage-tier: the admin token names
any org with ``?org=`` (default its own), an org owner/admin is confined to its own org
(another org's id answers 404). They answer 503 when ``RUNPLANE_DISABLE`` holds
``policy``; admission then applies the platform layer alone. ``/v1/policy/preflight``
(scope runs:submit) asks the admission gate exactly what a submit would, without
reserving or enqueuing.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from pydantic import Field, StringConstraints
from quart import Blueprint, request

from runplane.actors import admission as adm
from runplane.auth.rules import MANAGE, scope
from runplane.http import audit
from runplane.http.auth_hook import current_principal
from runplane.http.bodies import Body, parse_body
from runplane.http.caller import current_caller
from runplane.http.context import services
from runplane.http.guards import require_area
from runplane.http.mcp.tools import Tool
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.query import (
    accepts_query,
    choice,
    choice_arg,
    int_arg,
    integer,
    number,
    number_arg,
    str_arg,
)
from runplane.http.refusals import refusal_status
from runplane.jobs.spec import stack_issues, unknown_stack
from runplane.policy import (
    PolicyDoc,
    PolicyDocBody,
    above_platform,
    ceilings,
    effective,
    empty_doc,
    platform_caps,
)
from runplane.policy.manifest import effective_manifest
from runplane.problems import FieldProblem, Problem, not_found

blueprint = Blueprint("policy", __name__, url_prefix="/v1/policy")

Name = Annotated[str, StringConstraints(max_length=256)]
ISOLATION = ("none", "gvisor", "kata")
#: The query parameters of the preview (GET, and POST where the body leaves them out).
PREVIEW_PARAMS = ("org", "subject", "user", "project", "stack")
PREFLIGHT_PARAMS = (
    "stack",
    "project",
    choice("isolation", ISOLATION),
    number("cpu_cores"),
    number("ram_gb"),
    integer("gpu_count"),
    integer("timeout_sec"),
)


def _org() -> str:
    """The org a Manage-tier policy route acts on."""
    principal = current_principal()
    asked = str_arg("org")
    if principal.superuser:
        return asked or principal.org_id
    if asked is not None and asked != principal.org_id:
        raise not_found("org")
    return principal.org_id


def _platform() -> dict[str, int]:
    return platform_caps(services().settings)


async def _doc(org_id: str) -> PolicyDoc:
    return await adm.get_policy(services().root.admission, org_id) or empty_doc(org_id)


@blueprint.get("")
@accepts_query("org")
@doc("The org's policy", v.PolicyView, rule=MANAGE)
async def get_policy() -> dict[str, Any]:
    require_area("policy", "the policy engine")
    org_id = _org()
    doc, platform = await _doc(org_id), _platform()
    eff = effective(platform, doc)
    return {
        "org_id": org_id,
        "platform": platform,
        "policy": doc.view(),
        "effective": eff.view(),
        "effective_caps": ceilings(eff, platform).view(),
    }


@blueprint.put("")
@accepts_query("org")
@doc("Replace the org's policy", v.PolicyView, body=PolicyDocBody, rule=MANAGE)
async def put_policy() -> dict[str, Any]:
    require_area("policy", "the policy engine")
    org_id = _org()
    body = await parse_body(PolicyDocBody)
    if body.org_id is not None and body.org_id != org_id:
        raise Problem(
            400,
            "org_mismatch",
            f"the document names org {body.org_id!r} but this request writes {org_id!r}; "
            "drop org_id or use ?org= (admin token only)",
            [FieldProblem("org_id", "invalid", f"must be {org_id!r} or absent")],
        )
    body = await _weight_kept(org_id, body)
    doc = PolicyDoc.from_body(org_id, body, time.time_ns() // 1_000_000)
    await adm.put_policy(services().root.admission, doc)
    await services().root.shares.weight_changed(org_id, doc.fair_share_weight)
    await audit.record("policy:update", "policy", org_id, org_id=org_id, after=doc.stored())
    platform = _platform()
    return {
        "org_id": org_id,
        "policy": doc.view(),
        "effective": effective(platform, doc).view(),
        "notes": above_platform(doc, platform),
    }


async def _weight_kept(org_id: str, body: PolicyDocBody) -> PolicyDocBody:
    """Only the admin token sets ``fair_share_weight`` (an org must not raise its own
    share): another caller's document keeps the stored weight when it leaves it out (or
    sends it back as read); a different weight is 403 ``forbidden``."""
    if current_principal().superuser:
        return body
    stored = (await _doc(org_id)).fair_share_weight
    if body.fair_share_weight is None or body.fair_share_weight == stored:
        return body.model_copy(update={"fair_share_weight": stored})
    raise Problem(
        403,
        "forbidden",
        "only the admin token may change fair_share_weight; leave it out to keep "
        f"{stored if stored is not None else 'the default 1'}",
        [FieldProblem("fair_share_weight", "forbidden", "set by the operator")],
    )


class PreviewBody(Body):
    subject: Name | None = None
    user: Name | None = None  # alias of subject
    project: Name | None = None
    stack: Name | None = None


async def _preview(subject: str, project: str, stack_name: str | None) -> dict[str, Any]:
    require_area("policy", "the policy engine")
    org_id = _org()
    doc, platform = await _doc(org_id), _platform()
    eff = effective(platform, doc, subject=subject, project=project)
    caps = ceilings(eff, platform)
    out: dict[str, Any] = {
        "org_id": org_id,
        "subject": subject,
        "project": project,
        "effective": eff.view(),
        "effective_caps": caps.view(),
    }
    if stack_name:
        catalog = services().catalog
        stack = catalog.get(stack_name)
        if stack is None:
            out["stack_error"] = unknown_stack(stack_name, catalog)[0]
        else:
            out["stack"] = stack.name
            out["effective_manifest"] = effective_manifest(stack, caps)
    return out


@blueprint.get("/preview")
@accepts_query(*PREVIEW_PARAMS)
@doc("The effective policy for a subject", v.PolicyPreview, rule=MANAGE)
async def preview_get() -> dict[str, Any]:
    subject = str_arg("subject") or str_arg("user") or ""
    return await _preview(subject, str_arg("project") or "", str_arg("stack"))


@blueprint.post("/preview")
@accepts_query(*PREVIEW_PARAMS)
@doc(
    "The effective policy for a subject",
    v.PolicyPreview,
    body=PreviewBody,
    body_optional=True,
    rule=MANAGE,
)
async def preview_post() -> dict[str, Any]:
    body = await parse_body(PreviewBody) if await request.get_data() else PreviewBody()
    subject = body.subject or body.user or str_arg("subject") or str_arg("user") or ""
    project = body.project or str_arg("project") or ""
    return await _preview(subject, project, body.stack or str_arg("stack"))


# -- preflight ------------------------------------------------------------------------------

Number = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]


class PreflightLimits(Body):
    cpu_cores: Number | None = None
    ram_gb: Number | None = None
    gpu_count: Count | None = None
    timeout_sec: Count | None = None
    isolation: str | None = None


class PreflightBody(Body):
    stack: Name | None = None
    limits: PreflightLimits = PreflightLimits()
    project: Name = ""


def _integral(value: float | int | None) -> float | int | None:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


async def _preflight(
    stack_name: str | None, limits: dict[str, Any], project: str, isolation: str | None
) -> dict[str, Any]:
    if isolation is not None and isolation not in ISOLATION:
        raise Problem(
            400,
            "invalid_query",
            f"isolation: unknown value {isolation!r}; accepted: {', '.join(ISOLATION)}",
            [FieldProblem("isolation", "not_allowed", f"one of {', '.join(ISOLATION)}")],
        )
    caller = current_caller()
    request_ = adm.Request(caller.org_id, caller.subject, project, limits)
    decision = await adm.check(services().root.admission, request_)
    stack_error, stack_status = "", 0
    if stack_name:
        # the stack checks a submit makes before admission (unknown 400, unavailable 422)
        found = stack_issues(stack_name, services().catalog)[1]
        if found:
            stack_error, stack_status = found[0].detail, found[0].status
    clamped = {k: _integral(v) or 0 for k, v in decision.clamp.limits.items()}
    allowed = decision.allowed and not stack_error
    return {
        "org": decision.org_id,
        "stack": stack_name or "",
        "allowed": allowed,
        "clamped": clamped,
        "clamp_notes": list(decision.clamp.notes),
        "reason": stack_error or decision.reason,
        "http_status": stack_status or refusal_status(decision.refusal),
        "stack_error": stack_error,
        "concurrency": decision.concurrency.as_dict(),
    }


@blueprint.get("/preflight")
@accepts_query(*PREFLIGHT_PARAMS)
@doc("Would admission take this run?", v.PolicyPreflight, rule=scope("runs:submit"))
async def preflight_get() -> dict[str, Any]:
    limits = {
        "cpu_cores": number_arg("cpu_cores"),
        "ram_gb": number_arg("ram_gb"),
        "gpu_count": int_arg("gpu_count", 0) or None,
        "timeout_sec": int_arg("timeout_sec", 0) or None,
    }
    return await _preflight(
        str_arg("stack"), limits, str_arg("project") or "", choice_arg("isolation", ISOLATION)
    )


@blueprint.post("/preflight")
@doc(
    "Would admission take this run?",
    v.PolicyPreflight,
    body=PreflightBody,
    rule=scope("runs:submit"),
    mcp=Tool(
        "preflight_job",
        "Preflight a job",
        "Would admission take this run now? The limits after clamping and, when not, why.",
        PreflightBody,
    ),
)
async def preflight_post() -> dict[str, Any]:
    body = await parse_body(PreflightBody)
    limits = body.limits.model_dump(exclude={"isolation"})
    return await _preflight(body.stack, limits, body.project, body.limits.isolation)
