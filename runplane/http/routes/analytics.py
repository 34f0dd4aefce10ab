"""Job analytics (``runplane/jobs/analytics.py``) and fair share between orgs
(``runplane/services/shares.py``): tenant-filtered (the caller's org; the admin token and
an open deploy's anonymous caller see every org)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from runplane.auth.rules import READ
from runplane.http.caller import current_caller
from runplane.http.context import services
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.query import accepts_query, int_arg, integer, pattern, str_arg
from runplane.jobs import analytics

#: A window (runplane/timefmt.py ``duration_ms``) of at most 30 days.
WINDOW_PATTERN = (
    r"^(([1-9][0-9]{0,3}|[1-3][0-9]{4}|4[0-2][0-9]{3}|43[01][0-9]{2}|43200)m"
    r"|([1-9][0-9]?|[1-6][0-9]{2}|7[01][0-9]|720)h|([1-9]|[12][0-9]|30)d)$"
)

blueprint = Blueprint("analytics", __name__, url_prefix="/v1/analytics")


@blueprint.get("/jobs")
@accepts_query(
    pattern("window", WINDOW_PATTERN, description="15m, 24h, 7d: at most 30d"),
    integer("buckets", minimum=1, maximum=analytics.MAX_BUCKETS),
)
@doc(
    "Job counts over a window, bucketed",
    v.JobAnalytics,
    # tenant-filtered: the admin token (and an open deploy's anonymous caller) see all
    rule=READ,
)
async def jobs() -> dict[str, Any]:
    asked = str_arg("window", max_length=16) or analytics.DEFAULT_WINDOW
    window = analytics.parse_window(asked)
    buckets = int_arg(
        "buckets", analytics.DEFAULT_BUCKETS, minimum=1, maximum=analytics.MAX_BUCKETS
    )
    return await services().root.records.analytics(
        current_caller().read_org, window, buckets, asked.strip()
    )


@blueprint.get("/share")
@doc(
    "Fair share between orgs: each org's usage, weight and queue",
    v.FairShareView,
    # tenant-filtered: an org's member sees its own row; the admin token every org's
    rule=READ,
)
async def share() -> dict[str, Any]:
    return await services().root.shares.view(current_caller().read_org)
