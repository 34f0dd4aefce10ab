"""Share links and embed grants of a job (docs/sharing.md; spec: ShareResult, Embed).

A share link (``POST /v1/jobs/{id}/share``, scope ``runs:share``) is a signed, expiring,
read-only code for that one job; ``GET /s/{code}`` sends a browser to the run view with it.
``DELETE /v1/jobs/{id}/share`` revokes every code of the job. An embed grant (``POST
/v1/jobs/{id}/embed``) is the same kind of credential limited to categories and carrying
branding, for a page that embeds the run; ``GET /v1/embed/grant`` tells such a page what
its token allows. Both are checked against the store on every use (fail closed)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from quart import Blueprint, redirect, request
from werkzeug.wrappers.response import Response

from runplane.auth import shares
from runplane.auth.rules import PUBLIC, READ, scope
from runplane.auth.shares import EMBED_MAX_HOURS, EmbedMintBody, ShareBody
from runplane.http import audit
from runplane.http.bodies import parse_body
from runplane.http.caller import current_caller
from runplane.http.context import services
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.query import accepts_query
from runplane.http.routes.artifacts import public_origin
from runplane.jobs.rows import JobRow
from runplane.problems import Problem, not_found
from runplane.timefmt import iso_ms

blueprint = Blueprint("sharing", __name__)

#: Scopes any one of which lets a caller mint an embed grant (spec).
EMBED_SCOPES = ("runs:manage", "runs:share", "runs:submit")


async def _visible_job(job_id: str) -> JobRow:
    row = await services().root.records.row(job_id, current_caller().read_org)
    if row is None:
        raise not_found("job")
    return row


async def _optional_body(model: type[Any]) -> Any:
    """The body when one is sent (these bodies are all optional)."""
    if not (await request.get_data()):
        return model()
    return await parse_body(model)


async def _minted(row: JobRow, kind: str, by: str, ttl_hours: int, **grant: Any) -> dict[str, str]:
    """A new share code or embed grant on ``row``, audited (``runs:share``/``runs:embed``):
    ``{token, expires_at}``."""
    token, minted = await services().root.accounts.mint_grant(
        kind=kind,
        job_id=row.id,
        org_id=row.org_id,
        by=by,
        ttl_hours=ttl_hours,
        **grant,
    )
    await audit.record(
        f"runs:{kind}",
        "job",
        row.id,
        org_id=row.org_id,
        after={
            "grant_id": minted.id,
            "expires_at": iso_ms(minted.expires_at),
            "allow": list(minted.allow),
        },
    )
    return {"token": token, "expires_at": iso_ms(minted.expires_at)}


@blueprint.post("/v1/jobs/<job_id>/share")
@doc(
    "Make a read-only share link for a job",
    v.ShareResult,
    status=201,
    body=ShareBody,
    body_optional=True,
    rule=scope("runs:share"),
)
async def share_job(job_id: str) -> tuple[dict[str, str], int]:
    row = await _visible_job(job_id)
    body = await _optional_body(ShareBody)
    minted = await _minted(row, "share", current_caller().subject, body.ttl_hours)
    code = minted["token"]
    return {**minted, "code": code, "url": f"{public_origin()}/s/{code}"}, 201


@blueprint.delete("/v1/jobs/<job_id>/share")
@doc("Revoke every share link of a job", v.ShareRevoked, rule=scope("runs:share"))
async def revoke_shares(job_id: str) -> dict[str, Any]:
    row = await _visible_job(job_id)
    revoked = await services().root.accounts.revoke_grants(row.id, kind="share")
    await audit.record("runs:unshare", "job", row.id, org_id=row.org_id, after={"revoked": revoked})
    return {"job_id": row.id, "revoked": revoked}


@blueprint.get("/s/<code>")
@doc("Open a share link (a redirect to the run view)", status=302, content="redirect", rule=PUBLIC)
async def open_share(code: str) -> Response:
    """302 to the run view with the code; an unknown, expired, revoked or tampered code to
    the home page with ``?share_error=expired``."""
    try:
        grant = await services().root.accounts.verify_grant(code, kind="share")
    except shares.Refused:
        return redirect("/?share_error=expired", 302)
    return redirect(f"/jobs/{quote(grant.job_id)}?share={quote(code)}", 302)


@blueprint.post("/v1/jobs/<job_id>/embed")
@doc(
    "Mint an embed grant for a job",
    v.EmbedMintResult,
    status=201,
    body=EmbedMintBody,
    body_optional=True,
    # runs:manage, runs:share or runs:submit (any of): checked by the route
    rule=READ,
)
async def mint_embed(job_id: str) -> tuple[dict[str, Any], int]:
    svc = services()
    if not svc.root.accounts.supports_identity:
        raise Problem(
            503,
            "auth_store_unavailable",
            "embed grants need a database (this server runs with RUNPLANE_DATABASE_URL=memory)",
        )
    caller = current_caller()
    principal = caller.principal
    if principal is not None and principal.credential in ("share", "embed"):
        raise Problem(403, "forbidden", "a shared or embedded view cannot mint embed grants")
    open_anonymous = principal is None or (
        not principal.authenticated and svc.settings.auth != "required"
    )
    if not open_anonymous and not any(principal.has_scope(s) for s in EMBED_SCOPES):  # type: ignore[union-attr]
        raise Problem(
            403,
            "missing_scope",
            "minting an embed grant needs runs:manage, runs:share or runs:submit (a viewer cannot)",
        )
    row = await _visible_job(job_id)
    body = await _optional_body(EmbedMintBody)
    view = await mint_grant(row, body, caller.subject)
    return view, 201


async def mint_grant(row: JobRow, body: EmbedMintBody, by: str) -> dict[str, Any]:
    """EmbedMintResult ``{token, url, expires_at}`` for a new grant on ``row``; ``url`` is
    absolute (the public origin), as a share's is."""
    minted = await _minted(
        row,
        "embed",
        by,
        min(body.ttl_hours, EMBED_MAX_HOURS),
        allow=list(body.allow),
        branding=body.branding.model_dump(),
    )
    return {**minted, "url": f"{public_origin()}/embed/e/{minted['token']}"}


@blueprint.get("/v1/embed/grant")
@accepts_query("embed")
@doc("What an embed token allows", v.EmbedGrantView, errors=(401,), rule=PUBLIC)
async def embed_grant() -> dict[str, Any]:
    """EmbedGrantView of the token in ``X-Embed-Token`` or ``?embed=``; 401 for anything
    missing, expired, tampered or revoked."""
    if not services().root.accounts.supports_identity:
        raise Problem(503, "auth_store_unavailable", "embed grants need a database")
    token = request.headers.get("X-Embed-Token") or request.args.get("embed")
    if not token:
        raise Problem(401, "unauthorized", "send the embed token as X-Embed-Token or ?embed=")
    try:
        grant = await services().root.accounts.verify_grant(token, kind="embed")
    except shares.Refused as exc:
        raise Problem(401, "invalid_token", f"this embed token is not valid ({exc})") from None
    return grant.grant_view()


@blueprint.get("/embed/e/<token>")
@doc(
    "Open an embed link (a redirect to the embed view)",
    status=302,
    content="redirect",
    rule=PUBLIC,
)
async def open_embed(token: str) -> Response:
    try:
        grant = await services().root.accounts.verify_grant(token, kind="embed")
    except shares.Refused:
        return redirect("/embed?embed_error=expired", 302)
    return redirect(f"/embed?e={quote(token)}&j={quote(grant.job_id)}", 302)
