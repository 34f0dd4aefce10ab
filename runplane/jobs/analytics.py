"""Job analytics (``GET /v1/analytics/jobs``): per time bucket, the jobs submitted and the
jobs that ended succeeded, failed (failed + timeout) or cancelled, plus a summary with the
live jobs (queued; running = assigned, pulling or running), for one org or all.

Read from the per-minute rollup ``job_counts`` (``counts.py``), so the cost depends on
the window's minutes, never on the jobs in it: a 30-day window is at most 43,200 rows of
one org (or of ``*``, every org). Buckets are whole minutes: the width is the window over
the bucket count rounded up to a minute, the last bucket ends with the current minute,
and the ``window`` answered is the one covered (``24h`` in 48 buckets is exact; ``30d``
in 500 buckets is 500 x 87 minutes = ``725h``).
"""

from __future__ import annotations

import math
from typing import Any

from runplane.persistence import Store
from runplane.timefmt import window_ms

from .counts import ALL_ORGS, MINUTE_MS

DEFAULT_WINDOW = "24h"
MAX_WINDOW_MS = 30 * 86_400_000
DEFAULT_BUCKETS, MAX_BUCKETS = 48, 500
_LIVE = ("queued", "assigned", "pulling", "running")


def parse_window(text: str) -> int:
    """``15m``, ``24h``, ``7d`` -> milliseconds; a 400 naming ``window`` otherwise."""
    return window_ms(text, max_ms=MAX_WINDOW_MS, most="the most allowed, 30d")


def window_text(minutes: int) -> str:
    if minutes % 1440 == 0:
        return f"{minutes // 1440}d"
    if minutes % 60 == 0:
        return f"{minutes // 60}h"
    return f"{minutes}m"


async def job_analytics(
    store: Store,
    org_id: str | None,
    window_ms: int,
    buckets: int,
    now_ms: int,
    asked: str | None = None,
) -> dict[str, Any]:
    """JobAnalytics for ``org_id`` (None: every org) over the window ending now; ``asked``
    (the window as requested) is answered as it is when the buckets cover it exactly."""
    width = max(1, math.ceil(window_ms / buckets / MINUTE_MS))  # minutes per bucket
    end = now_ms // MINUTE_MS + 1  # the current minute included
    start = end - width * buckets
    org = ALL_ORGS if org_id is None else org_id
    rows = await store.fetchall(
        "SELECT (minute - ?) / ? AS b, SUM(submitted) AS submitted, SUM(succeeded) AS"
        " succeeded, SUM(failed) AS failed, SUM(cancelled) AS cancelled FROM job_counts"
        " WHERE org_id = ? AND minute >= ? AND minute < ? GROUP BY 1",
        (start, width, org, start, end),
    )
    counted = {int(r["b"]): r for r in rows}
    out, totals = [], dict.fromkeys(("submitted", "succeeded", "failed", "cancelled"), 0)
    for b in range(buckets):
        row = counted.get(b)
        bucket: dict[str, Any] = {"ts": (start + b * width) * MINUTE_MS}
        for key in totals:
            value = int(row[key] or 0) if row is not None else 0
            bucket[key] = value
            totals[key] += value
        out.append(bucket)
    return {
        "window": asked
        if asked and width * buckets * MINUTE_MS == window_ms
        else window_text(width * buckets),
        "buckets": out,
        "summary": {**totals, **await _live(store, org_id)},
    }


async def _live(store: Store, org_id: str | None) -> dict[str, int]:
    marks = ",".join("?" * len(_LIVE))
    where, params = f"phase IN ({marks})", list(_LIVE)
    if org_id is not None:
        where += " AND org_id = ?"
        params.append(org_id)
    rows = await store.fetchall(
        f"SELECT phase, COUNT(*) AS n FROM jobs WHERE {where} GROUP BY phase", params
    )
    by_phase = {r["phase"]: int(r["n"]) for r in rows}
    return {
        "running": sum(by_phase.get(p, 0) for p in ("assigned", "pulling", "running")),
        "queued": by_phase.get("queued", 0),
    }
