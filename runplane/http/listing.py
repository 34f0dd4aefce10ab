"""Listing jobs (and runs, which are jobs seen as runs): filters from the query string and
the two answers the spec names, a bare array (``limit``/``offset``) or, with
``paginate=1`` or a ``cursor``, the keyset envelope ``{items, next_cursor, has_more,
total}``. Cursors are stable while jobs are added (newest first)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from quart import request

from runplane.http.caller import current_caller
from runplane.http.context import services
from runplane.http.query import (
    Param,
    boolean,
    choice,
    choice_arg,
    flag_arg,
    int_arg,
    integer,
    str_arg,
    text,
)
from runplane.jobs import repo
from runplane.jobs.phase import PHASES
from runplane.jobs.rows import JobRow

LIST_DEFAULT, LIST_MAX = 500, 5000

#: The query parameters of the job list and of the run list (``@accepts_query``).
PAGE_PARAMS: tuple[Param, ...] = (
    integer("limit", minimum=1, maximum=LIST_MAX),
    integer("offset"),
    boolean("paginate", description="1 or true: the page envelope instead of the bare array"),
    text("cursor", description="next_cursor of the previous page (implies paginate)"),
)
_FILTERS: tuple[Param | str, ...] = (choice("phase", PHASES), "stack", "project")
JOB_LIST_PARAMS = (*_FILTERS, "spec", "node", "pipeline", "array", *PAGE_PARAMS)
RUN_LIST_PARAMS = (*_FILTERS, *PAGE_PARAMS)

Render = Callable[[list[JobRow]], Awaitable[list[dict[str, Any]]]]


def job_filter(*, spec_and_node: bool) -> repo.JobFilter:
    """The caller's org narrowing plus ``phase`` (400 when unknown), ``stack``, ``project``
    and, for jobs, ``spec``, ``node``, ``pipeline`` and ``array``."""
    return repo.JobFilter(
        org_id=current_caller().read_org,
        phase=choice_arg("phase", PHASES),
        stack=str_arg("stack"),
        project=str_arg("project"),
        spec_hash=str_arg("spec") if spec_and_node else None,
        node_id=str_arg("node") if spec_and_node else None,
        pipeline_run_id=str_arg("pipeline") if spec_and_node else None,
        array_id=str_arg("array") if spec_and_node else None,
    )


async def listing(flt: repo.JobFilter, render: Render) -> Any:
    store = services().store
    limit = int_arg("limit", LIST_DEFAULT, minimum=1, maximum=LIST_MAX)
    cursor = request.args.get("cursor")
    if not (flag_arg("paginate") or cursor):
        rows = await repo.list_rows(store, flt, limit=limit, offset=int_arg("offset", 0))
        return await render(rows)
    before = repo.decode_cursor(cursor) if cursor else None
    rows = await repo.list_rows(store, flt, limit=limit + 1, before=before)
    has_more = len(rows) > limit
    rows = rows[:limit]
    return {
        "items": await render(rows),
        "next_cursor": repo.encode_cursor(rows[-1].id) if has_more else "",
        "has_more": has_more,
        "total": await repo.count_rows(store, flt),
    }
