"""A submit never fails after the store said yes (issue 36 item 7): the 202 asks placement
for the new job's wait reason, best effort. With placement held busy, its mailbox full or
its answer late, the answer is still 202 ``queued`` (without a reason), one job is stored,
and it is placed once placement is free again. Before, it was a 503 for a stored job: a
client retrying without an Idempotency-Key made a second one.

Placement (the root's ``placement`` child) is held by a test message that blocks its
``handle``, as tests/http/test_overload.py holds the admission actor.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from quart_trio import QuartTrio

from runplane.actors import placement as pl
from runplane.actors.placement import PlacementActor, PlacementMsg
from runplane.http.context import Services
from runplane.runtime import ActorRef
from runplane.services import jobs as jobs_service
from tests.auth.support import ADMIN_H
from tests.http import holding
from tests.http.holding import held, hold_actor

BODY = {"stack": "shell", "command": ["true"]}


@pytest.fixture
def holdable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Placement blocks on a Hold; a late answer is waited for 0.2 s (the default is 1 s:
    real time in this app)."""
    holding.holdable(monkeypatch, PlacementActor)
    monkeypatch.setattr(jobs_service, "BEST_EFFORT_ASK_SEC", 0.2)


def placement_of(app: QuartTrio) -> ActorRef[PlacementMsg]:
    services: Services = app.extensions["runplane"]
    return services.root.placement


@pytest.mark.usefixtures("holdable")
@pytest.mark.parametrize("busy", ["full", "late"])
async def test_a_submit_placement_cannot_answer_is_still_202(
    app: QuartTrio, client: Any, busy: str
) -> None:
    placement = placement_of(app)
    with held() as hold:
        await hold_actor(placement, hold)
        if busy == "full":
            stats = placement.statistics()
            for queued in range(stats.capacity - stats.depth - 1):
                placement.try_tell(pl.Dequeue(f"job_absent_{queued}"))
        answer = await client.post("/v1/jobs", json=BODY, headers=ADMIN_H)
        body = await answer.get_json()
        assert answer.status_code == 202, body
        assert body["phase"] == "queued"
        assert body.get("wait_reason") in (None, "")
        if busy == "full":
            stats = placement.statistics()
            assert stats.depth == stats.capacity  # the submit's hand-off took the last place
        job_id = body["job_id"]

    # released: the job is there, once, and placement tells its reason again
    async def view() -> dict[str, Any]:
        got = await client.get(f"/v1/jobs/{job_id}", headers=ADMIN_H)
        assert got.status_code == 200
        result: dict[str, Any] = await got.get_json()
        return result

    with trio.fail_after(10):
        while True:  # no node: it waits, saying why
            if (await view()).get("wait_reason"):
                break
            await trio.sleep(0.05)
    listed = await (await client.get("/v1/jobs", headers=ADMIN_H)).get_json()
    assert [j["job_id"] for j in listed] == [job_id]
