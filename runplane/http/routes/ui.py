"""The web UI's pages (docs/ui.md): one HTML shell for every page, the single-page app in
``runplane/static`` (served by Quart's static route, with :func:`static_asset` as its
declared view) drawing the page from the public API.
The pages themselves hold no data, so they are public; what they show is what the
browser's token, share code or embed token may read."""

from __future__ import annotations

from quart import Blueprint, Response, current_app

from runplane.auth.rules import PUBLIC
from runplane.http.openapi import doc
from runplane.http.query import ignores_query

blueprint = Blueprint("ui", __name__)


async def _shell() -> Response:
    response = await current_app.send_static_file("index.html")
    response.headers["Cache-Control"] = "no-cache"
    return response


@blueprint.get("/")
@ignores_query
@doc("The web UI: the jobs list page", content="html", rule=PUBLIC)
async def home() -> Response:
    """The jobs list (``?share_error=`` says a share link expired)."""
    return await _shell()


@blueprint.get("/jobs/<job_id>")
@ignores_query
@doc("The web UI: a run view page", content="html", rule=PUBLIC)
async def run_page(job_id: str) -> Response:
    """The run view (``?share=<code>``: the read-only shared view)."""
    return await _shell()


@blueprint.get("/submit")
@blueprint.get("/nodes")
@blueprint.get("/pipelines")
@blueprint.get("/sessions")
@ignores_query
@doc("The web UI: a list page (submit, nodes, pipelines, sessions)", content="html", rule=PUBLIC)
async def list_page() -> Response:
    """Submit (from the stack catalog's launch view), nodes, pipelines and sessions."""
    return await _shell()


@blueprint.get("/pipelines/<run_id>")
@ignores_query
@doc("The web UI: a pipeline run page", content="html", rule=PUBLIC)
async def pipeline_page(run_id: str) -> Response:
    """A pipeline run's DAG with its stages' phases, live."""
    return await _shell()


@blueprint.get("/arrays/<array_id>")
@ignores_query
@doc("The web UI: a job array's sweep page", content="html", rule=PUBLIC)
async def array_page(array_id: str) -> Response:
    """A job array's sweep table (config and final metrics), its charts and counts, live."""
    return await _shell()


@blueprint.get("/embed")
@ignores_query
@doc("The web UI: the embed view page", content="html", rule=PUBLIC)
async def embed_page() -> Response:
    """The minimal embed view (``?e=<token>&j=<job>``, or ``?embed_error=``)."""
    return await _shell()


@doc("The web UI's assets (Quart's static route)", content="bytes", rule=PUBLIC)
async def static_asset(filename: str) -> Response:
    """Quart's ``static`` endpoint, declared: the app puts it in place of Quart's view."""
    return await current_app.send_static_file(filename)
