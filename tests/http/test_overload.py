"""Overload is a 503 with Retry-After, never a 500.

The admission actor (the root's ``admission`` child, which every policy/entitlements route
asks) is held busy by a test message that blocks its ``handle``; then:

* its mailbox is filled to capacity: a route that ``try_ask``s gets ``MailboxFull`` at
  once (what ``runplane.actors.admission``'s client functions do), one that ``ask``s waits
  for room until its timeout and gets ``AskTimeout``;
* or it just does not answer within the ask timeout: ``AskTimeout``.

Each is a 503 ``application/problem+json`` with ``code: "overloaded"`` and a positive
integer ``Retry-After``; once the actor is released the same route answers 200 again and
everything that was queued was handled.

The app runs on real time (the store's threads rule out the autojump clock), so the ask
timeout (of ``ask`` and ``try_ask``) is shortened while the actor is held instead of
waiting out the 5 s default.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from quart_trio import QuartTrio

from runplane.actors import admission as adm
from runplane.actors.admission import AdmissionActor, AdmissionMsg, GetUsage, Release, Usage
from runplane.http.context import Services
from runplane.runtime import DEFAULT_ASK_TIMEOUT, ActorRef, MailboxFull
from tests.auth.support import ADMIN_H
from tests.http import holding
from tests.http.holding import held, hold_actor

PROBLEM = "application/problem+json"
#: Real seconds an ask waits while the actor is held (the default is 5 s).
SHORT_ASK = 0.2

#: Routes that ask the admission actor, with the request each test makes.
ROUTES = [
    pytest.param("GET", "/v1/me/entitlements", None, id="entitlements"),
    pytest.param("POST", "/v1/policy/preflight", {"limits": {"cpu_cores": 1}}, id="preflight"),
    pytest.param("GET", "/v1/policy", None, id="get-policy"),
]


@pytest.fixture
def holdable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The admission actor blocks on a Hold; everything else as before."""
    holding.holdable(monkeypatch, AdmissionActor)


def admission_of(app: QuartTrio) -> ActorRef[AdmissionMsg]:
    services: Services = app.extensions["runplane"]
    return services.root.admission


@contextmanager
def short_asks() -> Iterator[None]:
    """The default timeout of ``ActorRef.ask`` and ``try_ask`` is ``SHORT_ASK`` inside the
    block (the default is bound when they are defined: it lives in ``__kwdefaults__``)."""
    all_defaults = [ActorRef.ask.__kwdefaults__, ActorRef.try_ask.__kwdefaults__]
    for defaults in all_defaults:
        assert defaults is not None and defaults["timeout"] == DEFAULT_ASK_TIMEOUT
        defaults["timeout"] = SHORT_ASK
    try:
        yield
    finally:
        for defaults in all_defaults:
            assert defaults is not None
            defaults["timeout"] = DEFAULT_ASK_TIMEOUT


def fill(admission: ActorRef[AdmissionMsg]) -> int:
    """Queue harmless tells until the mailbox refuses one; returns how many went in."""
    queued = 0
    while True:
        try:
            admission.try_tell(Release(f"job_absent_{queued}"))
        except MailboxFull:
            return queued
        queued += 1


async def call(client: Any, method: str, path: str, body: Any) -> Any:
    if method == "GET":
        return await client.get(path, headers=ADMIN_H)
    return await client.post(path, json=body, headers=ADMIN_H)


async def assert_overloaded(response: Any) -> None:
    body = await response.get_json()
    assert response.status_code == 503, body  # exactly: a 500 (no handler) fails here
    assert response.content_type == PROBLEM
    retry_after = response.headers.get("Retry-After")
    assert retry_after is not None and retry_after.isdigit() and int(retry_after) > 0
    assert body["status"] == 503
    assert body["code"] == "overloaded"
    assert body["request_id"] == response.headers["X-Request-ID"]


async def assert_ok(response: Any) -> None:
    body = await response.get_json()
    assert response.status_code == 200, body


@pytest.mark.usefixtures("holdable")
@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
async def test_full_mailbox_answers_503_then_recovers(
    app: QuartTrio, client: Any, method: str, path: str, body: Any
) -> None:
    admission = admission_of(app)
    with held() as hold:
        await hold_actor(admission, hold)
        received = admission.statistics().received
        queued = fill(admission)
        stats = admission.statistics()
        assert queued == stats.capacity == stats.depth  # full, and nothing drains it

        with short_asks():
            await assert_overloaded(await call(client, method, path, body))
            await assert_overloaded(await call(client, method, path, body))  # still busy

        stats = admission.statistics()
        assert stats.depth == stats.capacity  # the refused requests were not queued
        assert stats.waiting_senders == 0  # nor left waiting for room
    await assert_ok(await call(client, method, path, body))  # released: served again

    stats = admission.statistics()
    assert stats.depth == 0
    assert stats.received - received == queued + 1  # every queued tell, then the request


@pytest.mark.usefixtures("holdable")
@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
async def test_ask_timeout_answers_503_then_recovers(
    app: QuartTrio, client: Any, method: str, path: str, body: Any
) -> None:
    admission = admission_of(app)
    with held() as hold:
        await hold_actor(admission, hold)
        with short_asks():
            await assert_overloaded(await call(client, method, path, body))
        # the mailbox had room: the request is queued, unanswered (an abandoned ask)
        assert admission.statistics().depth == 1
    await assert_ok(await call(client, method, path, body))
    assert admission.statistics().depth == 0


@pytest.mark.usefixtures("holdable")
async def test_full_mailbox_with_try_ask_answers_503_at_once(
    app: QuartTrio, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The MailboxFull path itself, whichever way runplane.actors.admission's client
    # functions send (they try_ask now): entitlements made to try_ask. No short ask
    # timeout here: the mailbox refuses the request without waiting.
    async def usage(ref: ActorRef[AdmissionMsg], org_id: str, subject: str) -> Usage:
        result: Usage = await ref.try_ask(GetUsage(org_id, subject))
        return result

    monkeypatch.setattr(adm, "usage", usage)
    admission = admission_of(app)
    with held() as hold:
        await hold_actor(admission, hold)
        queued = fill(admission)
        refused = admission.statistics().refused
        await assert_overloaded(await call(client, "GET", "/v1/me/entitlements", None))
        assert admission.statistics().refused == refused + 1  # refused by the mailbox
        assert admission.statistics().depth == queued
    await assert_ok(await call(client, "GET", "/v1/me/entitlements", None))
