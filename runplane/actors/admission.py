"""The admission gate: one actor owning the policy documents and the quota ledger.

Every path that creates work (job and run submits, reruns; later pipelines and sessions)
asks ``Admit`` with the job id it is about to insert: the actor clamps the requested
limits to the caller's ceilings and, when the org and user are under their concurrency
quotas, reserves the slot, all in one message. The mailbox serializes decisions, so two
racing submits can never both take the last slot. Preflight asks ``Check``: the same
decision, nothing reserved.

The ledger counts live work (queued, assigned, pulling, running) per org and per
submitting user. Job actors report phase changes; a terminal phase releases the slot. On
(re)start the ledger is recounted from the store's live jobs, so a restart neither forgets
running work nor leaks slots.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, assert_never

from runplane.jobs import repo
from runplane.jobs.phase import Phase
from runplane.jobs.transitions import JobTransitioned, Transitions
from runplane.persistence import Store
from runplane.policy import Caps, Clamp, PolicyDoc, ceilings, clamp, effective
from runplane.policy import repo as policy_repo
from runplane.policy.clamp import Number
from runplane.policy.refusal import Refusal
from runplane.runtime import Actor, ActorRef, Asks

log = logging.getLogger("runplane.admission")

#: Cached ceilings per org before the cache is cleared (bounds memory for many subjects).
CAPS_CACHE_MAX = 4096


# messages -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    """Who creates work where, asking for which limits."""

    org_id: str
    subject: str
    project: str = ""
    limits: Mapping[str, Number | None] | None = None


@dataclass(frozen=True, slots=True)
class Admit(Asks["Decision"]):
    request: Request
    job_id: str


@dataclass(frozen=True, slots=True)
class AdmitMany(Asks["ManyDecision"]):
    """Admit a job array: every job's slot reserved, or none (``job_ids`` pair with
    ``requests``)."""

    requests: tuple[Request, ...]
    job_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Check(Asks["Decision"]):
    request: Request


@dataclass(frozen=True, slots=True)
class Release:
    job_id: str


@dataclass(frozen=True, slots=True)
class PhaseChanged:
    """A job's phase changed (durably). It carries the job's org and submitter, so a live
    job the ledger does not know (admitted by an incarnation that crashed before this
    one recounted) is counted at its next transition."""

    job_id: str
    phase: Phase
    org_id: str = ""
    subject: str = ""


@dataclass(frozen=True, slots=True)
class GetPolicy(Asks["PolicyDoc | None"]):
    org_id: str


@dataclass(frozen=True, slots=True)
class PutPolicy(Asks[None]):
    doc: PolicyDoc


@dataclass(frozen=True, slots=True)
class GetUsage(Asks["Usage"]):
    org_id: str
    subject: str


@dataclass(frozen=True, slots=True)
class Ledger(Asks["LedgerCounts"]):
    """The ledger's counts as they are now (for tests and operators)."""


AdmissionMsg = (
    Admit | AdmitMany | Check | Release | PhaseChanged | GetPolicy | PutPolicy | GetUsage | Ledger
)


# replies --------------------------------------------------------------------------------


def follow_jobs(admission: ActorRef[AdmissionMsg], transitions: Transitions) -> None:
    """The ledger hears every job's phase change once it is stored (the first of the
    transitions' subscribers: a terminal phase frees the slot before the transition's
    effects give placement the node's capacity back). ``tell_now`` queues without a
    scheduling point (a yield per transition had tripled the paced submit-to-running
    latency)."""

    async def phase_changed(moved: JobTransitioned) -> None:
        if moved.changed:
            row = moved.row
            await admission.tell_now(
                PhaseChanged(row.id, moved.phase, row.org_id, row.submitted_by)
            )

    transitions.subscribe(phase_changed)


@dataclass(frozen=True, slots=True)
class Concurrency:
    org_inflight: int
    org_limit: int
    user_inflight: int
    user_limit: int

    def as_dict(self) -> dict[str, int]:
        return {
            "org_inflight": self.org_inflight,
            "org_limit": self.org_limit,
            "user_inflight": self.user_inflight,
            "user_limit": self.user_limit,
        }


@dataclass(frozen=True, slots=True)
class Decision:
    org_id: str
    allowed: bool
    clamp: Clamp
    caps: Caps
    concurrency: Concurrency
    reason: str = ""
    #: why it is refused (None when allowed); the HTTP layer maps the kind to a status
    refusal: Refusal | None = None


@dataclass(frozen=True, slots=True)
class ManyDecision:
    """A job array's admission: each job's decision (its clamp), all allowed; or refused
    (nothing reserved) with why, saying how many of them would fit now."""

    decisions: tuple[Decision, ...]
    refusal: Refusal | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class LedgerCounts:
    live: int
    per_org: dict[str, int]
    on_node_per_org: dict[str, int]
    per_user: dict[tuple[str, str], int]


@dataclass(frozen=True, slots=True)
class Usage:
    org_id: str
    queued: int
    on_node: int  # assigned, pulling or running
    user_inflight: int
    caps: Caps


# the actor ------------------------------------------------------------------------------


class AdmissionActor(Actor[AdmissionMsg]):
    def __init__(self, store: Store, platform: Mapping[str, int], *, use_docs: bool = True) -> None:
        self._store = store
        self._platform = dict(platform)
        self._platform_caps = ceilings(effective(self._platform, None), self._platform)
        self._use_docs = use_docs
        self._docs: dict[str, PolicyDoc] = {}
        self._caps: dict[str, dict[tuple[str, str], Caps]] = {}
        # the ledger: job id -> (org, subject, on a node)
        self._live: dict[str, tuple[str, str, bool]] = {}
        self._org: Counter[str] = Counter()
        self._org_on_node: Counter[str] = Counter()
        self._user: Counter[tuple[str, str]] = Counter()

    async def on_start(self) -> None:
        self._docs = await policy_repo.load_all(self._store) if self._use_docs else {}
        rows = await repo.live_columns(self._store, "id, org_id, submitted_by, phase")
        for row in rows:
            self._add(row["id"], row["org_id"], row["submitted_by"], Phase(row["phase"]).on_node)
        if rows:
            log.info("admission ledger recounted", extra={"live_jobs": len(rows)})

    async def handle(self, msg: AdmissionMsg) -> object:
        match msg:
            case Admit(request, job_id):
                decision = self._decide(request)
                if decision.allowed:
                    self._add(job_id, request.org_id, request.subject, False)
                return decision
            case AdmitMany(requests, job_ids):
                return self._admit_many(requests, job_ids)
            case Check(request):
                return self._decide(request)
            case Release(job_id):
                self._remove(job_id)
            case PhaseChanged(job_id, phase, org_id, subject):
                self._phase(job_id, Phase(phase), org_id, subject)
            case GetPolicy(org_id):
                return self._docs.get(org_id)
            case PutPolicy(doc):
                await policy_repo.save(self._store, doc)  # durable before it applies
                if doc.empty:
                    self._docs.pop(doc.org_id, None)
                else:
                    self._docs[doc.org_id] = doc
                self._caps.pop(doc.org_id, None)
            case GetUsage(org_id, subject):
                return Usage(
                    org_id=org_id,
                    queued=self._org[org_id] - self._org_on_node[org_id],
                    on_node=self._org_on_node[org_id],
                    user_inflight=self._user[(org_id, subject)],
                    caps=self._caps_for(org_id, subject, ""),
                )
            case Ledger():
                return LedgerCounts(
                    live=len(self._live),
                    per_org=dict(self._org),
                    on_node_per_org=dict(self._org_on_node),
                    per_user=dict(self._user),
                )
            case _:
                assert_never(msg)
        return None

    # -- decisions ----------------------------------------------------------------------

    def _caps_for(self, org_id: str, subject: str, project: str) -> Caps:
        doc = self._docs.get(org_id)
        if doc is None:
            return self._platform_caps
        cached = self._caps.setdefault(org_id, {})
        key = (subject, project)
        caps = cached.get(key)
        if caps is None:
            if len(cached) >= CAPS_CACHE_MAX:
                cached.clear()
            eff = effective(self._platform, doc, subject=subject, project=project)
            caps = cached[key] = ceilings(eff, self._platform)
        return caps

    def _decide(self, request: Request) -> Decision:
        org_id, subject = request.org_id, request.subject
        caps = self._caps_for(org_id, subject, request.project)
        clamped = clamp(request.limits or {}, caps)
        concurrency = Concurrency(
            org_inflight=self._org[org_id],
            org_limit=caps["max_concurrent_org"],
            user_inflight=self._user[(org_id, subject)],
            user_limit=caps["max_concurrent_user"],
        )
        reason = _over_quota(org_id, subject, concurrency, caps)
        return Decision(
            org_id=org_id,
            allowed=not reason,
            clamp=clamped,
            caps=caps,
            concurrency=concurrency,
            reason=reason,
            refusal=Refusal.QUOTA_EXCEEDED if reason else None,
        )

    def _admit_many(self, requests: tuple[Request, ...], job_ids: tuple[str, ...]) -> ManyDecision:
        decisions: list[Decision] = []
        for request, job_id in zip(requests, job_ids, strict=True):
            decision = self._decide(request)
            if not decision.allowed:
                for taken in job_ids[: len(decisions)]:
                    self._remove(taken)
                fits = len(decisions)
                return ManyDecision(
                    (),
                    decision.refusal,
                    f"{decision.reason}. Of this batch's {len(requests)} jobs, {fits} fit "
                    "now: send fewer, or wait for live ones to finish",
                )
            self._add(job_id, request.org_id, request.subject, False)
            decisions.append(decision)
        return ManyDecision(tuple(decisions))

    # -- the ledger ---------------------------------------------------------------------

    def _add(self, job_id: str, org_id: str, subject: str, on_node: bool) -> None:
        if job_id in self._live:
            return
        self._live[job_id] = (org_id, subject, on_node)
        self._org[org_id] += 1
        self._user[(org_id, subject)] += 1
        if on_node:
            self._org_on_node[org_id] += 1

    def _remove(self, job_id: str) -> None:
        entry = self._live.pop(job_id, None)
        if entry is None:
            return
        org_id, subject, on_node = entry
        _decrement(self._org, org_id)
        _decrement(self._user, (org_id, subject))
        if on_node:
            _decrement(self._org_on_node, org_id)

    def _phase(self, job_id: str, phase: Phase, org_id: str, subject: str) -> None:
        if phase.terminal:
            self._remove(job_id)
            return
        entry = self._live.get(job_id)
        if entry is None:
            if org_id:  # live work this incarnation has not counted yet
                self._add(job_id, org_id, subject, phase.on_node)
            return
        if entry[2] == phase.on_node:
            return
        org_id, subject, _ = entry
        self._live[job_id] = (org_id, subject, phase.on_node)
        if phase.on_node:
            self._org_on_node[org_id] += 1
        else:
            _decrement(self._org_on_node, org_id)


def _decrement(counter: Counter[Any], key: Any) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]


def _over_quota(org_id: str, subject: str, c: Concurrency, caps: Caps) -> str:
    if c.org_limit and c.org_inflight >= c.org_limit:
        layer = caps.provenance["max_concurrent_org"]
        return (
            f"org {org_id} has {c.org_inflight} live runs (queued, assigned, pulling or "
            f"running) and its limit is {c.org_limit} (max_concurrent_org, {layer} layer); "
            "wait for one to finish or cancel one"
        )
    if c.user_limit and c.user_inflight >= c.user_limit:
        layer = caps.provenance["max_concurrent_user"]
        return (
            f"user {subject} has {c.user_inflight} live runs in org {org_id} and the per-user "
            f"limit is {c.user_limit} (max_concurrent_user, {layer} layer); wait for one to "
            "finish or cancel one"
        )
    return ""


# client functions -----------------------------------------------------------------------
# Callers are request paths: a full mailbox is MailboxFull at once (503), not a wait.


async def admit(ref: ActorRef[AdmissionMsg], request: Request, job_id: str) -> Decision:
    return await ref.try_ask(Admit(request, job_id))


async def admit_many(
    ref: ActorRef[AdmissionMsg], requests: tuple[Request, ...], job_ids: tuple[str, ...]
) -> ManyDecision:
    return await ref.try_ask(AdmitMany(requests, job_ids))


async def check(ref: ActorRef[AdmissionMsg], request: Request) -> Decision:
    return await ref.try_ask(Check(request))


async def get_policy(ref: ActorRef[AdmissionMsg], org_id: str) -> PolicyDoc | None:
    return await ref.try_ask(GetPolicy(org_id))


async def put_policy(ref: ActorRef[AdmissionMsg], doc: PolicyDoc) -> None:
    await ref.try_ask(PutPolicy(doc))


async def usage(ref: ActorRef[AdmissionMsg], org_id: str, subject: str) -> Usage:
    return await ref.try_ask(GetUsage(org_id, subject))
