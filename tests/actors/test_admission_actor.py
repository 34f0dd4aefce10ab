"""The admission actor: racing admits never overshoot a quota, slots come back on release
and terminal phases, Check reserves nothing, the ledger is recounted from the store on
start, and policy documents persist and apply at once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import pytest
import trio

from runplane.actors.admission import (
    AdmissionActor,
    AdmissionMsg,
    Decision,
    PhaseChanged,
    Release,
    Request,
    admit,
    check,
    get_policy,
    put_policy,
    usage,
)
from runplane.jobs import repo as jobs_repo
from runplane.jobs.phase import TERMINAL
from runplane.jobs.spec import SubmitJobBody, resolve
from runplane.persistence import Store, now_ms, open_store
from runplane.policy import PolicyDoc, empty_doc
from runplane.policy import repo as policy_repo
from runplane.policy.refusal import Refusal
from runplane.runtime import ActorRef, ChildSpec, Supervisor
from runplane.stacks import load_catalog

PLATFORM = {
    "max_cpu": 128,
    "max_ram": 1024,
    "max_gpu": 16,
    "max_timeout_sec": 604800,
    "max_concurrent_org": 100,
    "max_concurrent_user": 0,  # no per-user cap
    "max_preempt_grace_sec": 300,
    "preemptible_default": False,
}
TERMINAL_PHASES = sorted(p.value for p in TERMINAL)


def stamped(doc: PolicyDoc) -> PolicyDoc:
    """``doc`` as PUT stores it: with ``updated_at`` set."""
    return replace(doc, updated_at=now_ms())


@asynccontextmanager
async def admission(
    store: Store, platform: Mapping[str, int] = PLATFORM, *, use_docs: bool = True
) -> AsyncIterator[ActorRef[AdmissionMsg]]:
    """A running admission actor on ``store``, stopped after the block."""
    sup = Supervisor(name="test")
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        try:
            yield await sup.start_child(
                ChildSpec("admission", lambda: AdmissionActor(store, platform, use_docs=use_docs))
            )
        finally:
            with trio.CancelScope(shield=True):
                await sup.stop()


@pytest.fixture
async def mem(tmp_path: Path) -> AsyncIterator[Store]:
    """A memory store, for the tests that are about the ledger, not the backends."""
    s = open_store("memory", tmp_path)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


def req(subject: str = "u", org_id: str = "o", project: str = "") -> Request:
    return Request(org_id=org_id, subject=subject, project=project)


def refused(decision: Decision, *fragments: str) -> bool:
    return (
        not decision.allowed
        and decision.refusal is Refusal.QUOTA_EXCEEDED
        and all(f in decision.reason for f in fragments)
    )


# -- quotas ---------------------------------------------------------------------------------


async def test_fifty_racing_admits_take_exactly_ten_slots(mem: Store) -> None:
    decisions: dict[int, Decision] = {}
    async with admission(mem, {**PLATFORM, "max_concurrent_org": 10}) as ref:

        async def one(i: int) -> None:
            decisions[i] = await admit(ref, req(f"user{i}"), f"job{i}")

        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(one, i)
        allowed = [d for d in decisions.values() if d.allowed]
        denied = [d for d in decisions.values() if not d.allowed]
        assert (len(allowed), len(denied)) == (10, 40)
        assert all(d.refusal is None and d.reason == "" for d in allowed)
        # serialized: each admitted one saw the ones before it
        assert sorted(d.concurrency.org_inflight for d in allowed) == list(range(10))
        for d in denied:
            assert refused(d, "org o has 10 live runs", "limit is 10", "max_concurrent_org")
            assert d.concurrency.org_inflight == 10
        u = await usage(ref, "o", "user0")
        assert (u.queued, u.on_node) == (10, 0)


async def test_the_org_limit_from_the_org_layer_is_named(mem: Store) -> None:
    async with admission(mem) as ref:
        await put_policy(ref, stamped(PolicyDoc("o", org={"max_concurrent_org": 1})))
        assert (await admit(ref, req("a"), "j1")).allowed
        d = await admit(ref, req("b"), "j2")
        assert refused(d, "org o ", "limit is 1 (max_concurrent_org, org layer)")
        assert (await admit(ref, req("b", org_id="other"), "j3")).allowed  # another org


async def test_user_cap_refuses_independently_of_the_org_cap(mem: Store) -> None:
    platform = {**PLATFORM, "max_concurrent_org": 3, "max_concurrent_user": 2}
    async with admission(mem, platform) as ref:
        assert (await admit(ref, req("u"), "u1")).allowed
        assert (await admit(ref, req("u"), "u2")).allowed
        d = await admit(ref, req("u"), "u3")
        assert refused(d, "user u has 2 live runs in org o", "per-user limit is 2")
        assert "max_concurrent_user, platform layer" in d.reason
        assert (d.concurrency.user_inflight, d.concurrency.org_inflight) == (2, 2)
        assert (await admit(ref, req("u", org_id="o2"), "x1")).allowed  # per org
        assert (await admit(ref, req("v"), "v1")).allowed  # the org's third slot
        d = await admit(ref, req("v"), "v2")  # v is under its cap; the org is full
        assert refused(d, "org o has 3 live runs", "limit is 3")


async def test_user_cap_from_the_user_layer(mem: Store) -> None:
    async with admission(mem) as ref:
        await put_policy(ref, stamped(PolicyDoc("o", users={"u": {"max_concurrent_user": 1}})))
        assert (await admit(ref, req("u"), "u1")).allowed
        assert refused(
            await admit(ref, req("u"), "u2"), "user u", "(max_concurrent_user, user layer)"
        )
        for i in range(5):  # v has no cap
            assert (await admit(ref, req("v"), f"v{i}")).allowed


async def test_check_never_reserves(mem: Store) -> None:
    async with admission(mem, {**PLATFORM, "max_concurrent_org": 1}) as ref:
        for _ in range(5):
            d = await check(ref, req())
            assert d.allowed and d.concurrency.org_inflight == 0
        assert (await usage(ref, "o", "u")).queued == 0
        assert (await admit(ref, req(), "j1")).allowed
        for _ in range(3):
            assert refused(await check(ref, req()), "org o")
        u = await usage(ref, "o", "u")
        assert (u.queued, u.user_inflight) == (1, 1)


async def test_admit_clamps_the_limits(mem: Store) -> None:
    async with admission(mem) as ref:
        request = Request("o", "u", limits={"cpu_cores": 200, "ram_gb": 4})
        d = await admit(ref, request, "j1")
        assert d.allowed
        assert d.clamp.notes == ("cpu 200->128",)
        assert d.clamp.limits == {
            "cpu_cores": 128,
            "ram_gb": 4,
            "gpu_count": None,
            "timeout_sec": 604800,
        }


# -- releasing slots ------------------------------------------------------------------------


async def test_release_frees_one_slot_even_when_repeated(mem: Store) -> None:
    async with admission(mem, {**PLATFORM, "max_concurrent_org": 2}) as ref:
        assert (await admit(ref, req(), "a")).allowed
        assert (await admit(ref, req(), "b")).allowed
        assert refused(await admit(ref, req(), "c"), "org o")
        await ref.tell(Release("a"))
        await ref.tell(Release("a"))
        await ref.tell(Release("never-admitted"))
        assert (await admit(ref, req(), "c")).allowed
        assert refused(await admit(ref, req(), "d"), "org o has 2 live runs")
        assert (await usage(ref, "o", "u")).user_inflight == 2


@pytest.mark.parametrize("phase", TERMINAL_PHASES)
async def test_a_terminal_phase_frees_one_slot(mem: Store, phase: str) -> None:
    async with admission(mem, {**PLATFORM, "max_concurrent_org": 2}) as ref:
        assert (await admit(ref, req(), "a")).allowed
        assert (await admit(ref, req(), "b")).allowed
        await ref.tell(PhaseChanged("a", "running"))
        await ref.tell(PhaseChanged("a", phase))
        await ref.tell(PhaseChanged("a", phase))
        assert (await admit(ref, req(), "c")).allowed
        await ref.tell(Release("a"))  # already released by the phase
        assert refused(await admit(ref, req(), "d"), "org o has 2 live runs")
        u = await usage(ref, "o", "u")
        assert (u.queued, u.on_node, u.user_inflight) == (2, 0, 2)


async def test_phase_changes_move_jobs_on_and_off_nodes(mem: Store) -> None:
    async with admission(mem) as ref:

        async def counts() -> tuple[int, int, int]:
            u = await usage(ref, "o", "u")
            return u.queued, u.on_node, u.user_inflight

        assert (await admit(ref, req(), "a")).allowed
        assert (await admit(ref, req(), "b")).allowed
        assert await counts() == (2, 0, 2)
        await ref.tell(PhaseChanged("a", "assigned"))
        assert await counts() == (1, 1, 2)
        await ref.tell(PhaseChanged("a", "pulling"))
        await ref.tell(PhaseChanged("a", "running"))  # still one job on a node
        assert await counts() == (1, 1, 2)
        await ref.tell(PhaseChanged("b", "running"))
        assert await counts() == (0, 2, 2)
        await ref.tell(PhaseChanged("a", "queued"))  # node lost: back in the queue
        assert await counts() == (1, 1, 2)
        await ref.tell(PhaseChanged("b", "succeeded"))
        assert await counts() == (1, 0, 1)
        await ref.tell(PhaseChanged("unknown", "running"))  # not in the ledger: ignored
        assert await counts() == (1, 0, 1)


# -- restart: the ledger comes back from the store ------------------------------------------

#: job id -> (org, submitter, phase)
JOBS = {
    "j_queued": ("o", "u", "queued"),
    "j_assigned": ("o", "u", "assigned"),
    "j_running": ("o", "v", "running"),
    "j_pulling_o2": ("o2", "u", "pulling"),
    **{f"j_{phase}": ("o", "u", phase) for phase in TERMINAL_PHASES},
}


async def insert_jobs(store: Store) -> None:
    resolved = resolve(SubmitJobBody(stack="shell", seed=1), load_catalog())
    for job_id, (org_id, subject, phase) in JOBS.items():
        job = jobs_repo.NewJob(
            id=job_id,
            org_id=org_id,
            project="",
            submitted_by=subject,
            spec=resolved.spec,
            spec_hash=resolved.spec_hash,
            priority=0,
        )
        await store.transaction(jobs_repo.insert_job(store, job))
        await store.execute("UPDATE jobs SET phase = ? WHERE id = ?", (phase, job_id))


async def test_a_fresh_actor_recounts_live_jobs(store: Store) -> None:
    await insert_jobs(store)
    platform = {**PLATFORM, "max_concurrent_org": 4, "max_concurrent_user": 3}
    async with admission(store, platform) as ref:
        u = await usage(ref, "o", "u")
        assert (u.queued, u.on_node, u.user_inflight) == (1, 2, 2)
        assert (await usage(ref, "o", "v")).user_inflight == 1
        o2 = await usage(ref, "o2", "u")
        assert (o2.queued, o2.on_node, o2.user_inflight) == (0, 1, 1)

        d = await check(ref, req("u"))
        assert (d.concurrency.org_inflight, d.concurrency.user_inflight) == (3, 2)
        assert (await admit(ref, req("w"), "new1")).allowed  # the org's fourth slot
        assert refused(await admit(ref, req("w"), "new2"), "org o has 4 live runs")

        # a recounted job releases like an admitted one, on or off a node
        await ref.tell(PhaseChanged("j_assigned", "succeeded"))
        u = await usage(ref, "o", "u")
        assert (u.queued, u.on_node, u.user_inflight) == (2, 1, 1)
        assert (await admit(ref, req("w"), "new2")).allowed


async def test_recount_survives_a_restart(store: Store) -> None:
    await insert_jobs(store)
    platform = {**PLATFORM, "max_concurrent_org": 4}
    for _ in range(2):  # the same count from the same rows, every start
        async with admission(store, platform) as ref:
            assert (await check(ref, req("w"))).concurrency.org_inflight == 3


# -- policy documents -----------------------------------------------------------------------


async def test_put_policy_applies_at_once(mem: Store) -> None:
    async with admission(mem) as ref:
        big = Request("o", "u", limits={"cpu_cores": 100})
        await put_policy(ref, stamped(PolicyDoc("o", org={"max_cpu": 64, "max_concurrent_org": 5})))
        d = await check(ref, big)  # caches the caps for (u, "")
        assert (d.clamp.notes, d.concurrency.org_limit) == (("cpu 100->64",), 5)
        assert (await usage(ref, "o", "u")).caps["max_cpu"] == 64

        await put_policy(ref, stamped(PolicyDoc("o", org={"max_cpu": 32, "max_concurrent_org": 1})))
        d = await check(ref, big)
        assert (d.clamp.notes, d.concurrency.org_limit) == (("cpu 100->32",), 1)
        assert d.caps.provenance["max_cpu"] == "org"
        assert (await admit(ref, req(), "a")).allowed
        assert refused(await admit(ref, req(), "b"), "limit is 1")

        await put_policy(ref, stamped(empty_doc("o")))  # back to the platform layer
        assert await get_policy(ref, "o") is None
        d = await admit(ref, big, "b")
        assert d.allowed and d.concurrency.org_limit == 100
        assert (d.clamp.notes, d.clamp.limits["cpu_cores"]) == ((), 100)
        assert d.caps.provenance["max_cpu"] == "platform"


async def test_put_policy_persists(store: Store) -> None:
    doc = stamped(
        PolicyDoc(
            "o",
            org={"max_cpu": 64},
            projects={"p": {"max_ram": 8}},
            users={"u": {"max_concurrent_user": 1}},
        )
    )
    async with admission(store) as ref:
        await put_policy(ref, doc)
        assert await get_policy(ref, "o") == doc
    assert await policy_repo.load_all(store) == {"o": doc}

    async with admission(store) as ref:  # a new actor on the same store
        assert await get_policy(ref, "o") == doc
        d = await admit(ref, Request("o", "u", "p", {"cpu_cores": 100, "ram_gb": 10}), "a")
        assert d.allowed and d.clamp.notes == ("cpu 100->64", "ram 10->8")
        assert refused(await admit(ref, req("u"), "b"), "user u", "user layer")
        await put_policy(ref, stamped(empty_doc("o")))  # an empty doc deletes the row

    row = await store.fetchone("SELECT COUNT(*) AS n FROM policies WHERE org_id = ?", ("o",))
    assert row is not None and row["n"] == 0
    async with admission(store) as ref:
        assert await get_policy(ref, "o") is None


async def test_use_docs_false_ignores_stored_docs(store: Store) -> None:
    doc = stamped(PolicyDoc("o", org={"max_cpu": 2, "max_concurrent_org": 1}))
    await policy_repo.save(store, doc)
    async with admission(store) as ref:  # the doc applies...
        assert await get_policy(ref, "o") == doc
        assert (await check(ref, req())).caps["max_cpu"] == 2
    async with admission(store, use_docs=False) as ref:  # ...unless docs are off
        assert await get_policy(ref, "o") is None
        d = await admit(ref, Request("o", "u", limits={"cpu_cores": 8}), "a")
        assert d.allowed and d.clamp.notes == ()
        assert d.caps.values == PLATFORM
        assert (await admit(ref, req(), "b")).allowed
