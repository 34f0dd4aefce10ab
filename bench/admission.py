"""admission: the admission gate's cost per submit, with and without a policy document.

    python -m bench.admission [--quick] [--admits N] [--rounds R] [--http-rounds H]
        [--seconds S] [--connections 50]

Two parts, each interleaved in rounds (A B, then B A, ...) so the machine's drift hits
every variant alike:

* ``admit_us``: the gate alone, in process. An ``AdmissionActor`` under a runtime
  ``Supervisor`` (as ``runplane/actors/root.py`` specifies it) on a fresh SQLite store;
  N sequential ``admit()`` + ``Release`` round trips (what ``Jobs._create`` sends per
  submit), timed one by one, in microseconds: ``no_policy`` (platform caps only),
  ``policy`` (a document whose org, project and user layers all apply to the request;
  its ceilings come from the actor's cache after the first), ``policy_cache_miss`` (the
  same document, every request a new (subject, project) pair whose user and project
  layers apply: the effective policy is folded afresh each time). ``echo`` is the same
  ask + tell to an actor that does nothing: the messaging floor the gate sits on.
  ``decision_us`` is the pure part (fold + ceilings + clamp, no actor) per variant.
* ``submit``: ``POST /v1/jobs`` at 50 connections (``bench.submit``'s body, no node
  connected) against a fresh ``runplane serve`` per round, without a policy document and
  after ``PUT /v1/policy`` (admin token): jobs/s, latency, server CPU per accepted submit
  (the server's CPU time over the whole load / jobs stored), each the median of the
  rounds (one fresh server per round and variant), and ``policy_over_no_policy``: the
  median of the per-round ratios (the A/B figure; the two runs of a round see the same
  machine). The platform's
  ``RUNPLANE_MAX_CONCURRENT_ORG`` is 0 (no cap) so no submit is refused: with the default
  (100) every submit past the 100th queued job is a 429.

``gate_share_of_submit_cpu`` is the in-process admit round trip over the server CPU per
submit. ``--quick``: 20,000 admits per variant in 2 rounds, 3 HTTP rounds of 3 s (about
40 s); full: 100,000 in 3, 5 of 8 s (about 2.5 minutes).

Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import trio

from bench import common
from bench.submit import BODY
from runplane.actors.admission import (
    CAPS_CACHE_MAX,
    AdmissionActor,
    Release,
    Request,
    admit,
    put_policy,
)
from runplane.persistence import open_store
from runplane.policy import PolicyDoc, PolicyDocBody, ceilings, clamp, effective, platform_caps
from runplane.runtime import Actor, ActorRef, ChildSpec, Supervisor
from runplane.settings import Settings

ORG = "org_default"  # where anonymous submits land
SUBJECT = "anonymous"
PROJECT = "bench"  # bench.submit's body names it
#: the PUT /v1/policy body: org, project and user layers that all apply to the submits
POLICY = {
    "org": {"max_cpu": 64, "max_concurrent_org": 100000},
    "projects": {PROJECT: {"max_ram": 512}},
    "users": {SUBJECT: {"max_gpu": 4}},
}
#: requested limits of every in-process admit (none is reduced by either ceiling)
LIMITS: dict[str, int | float | None] = {
    "cpu_cores": 2,
    "ram_gb": 4,
    "gpu_count": None,
    "timeout_sec": None,
}
#: users and projects the in-process document refines besides the above (the cache-miss
#: variant's (subject, project) pairs are drawn from them, all distinct)
EXTRA = 999
ADMIN_TOKEN = "bench-admin-token-0123456789abcdef"
VARIANTS = ("echo", "no_policy", "policy", "policy_cache_miss")
WARMUP = 200  # untimed round trips per variant and round


def bench_doc() -> PolicyDoc:
    """The in-process document: ``POLICY`` plus EXTRA more projects and users."""
    body = PolicyDocBody.model_validate(
        {
            "org": {**POLICY["org"], "max_concurrent_org": 0},
            "projects": {
                **POLICY["projects"],
                **{f"p{i}": {"max_ram": 256 + i % 7} for i in range(EXTRA)},
            },
            "users": {
                **POLICY["users"],
                **{f"u{i}": {"max_gpu": i % 5} for i in range(EXTRA)},
            },
        }
    )
    return PolicyDoc.from_body(ORG, body, int(time.time() * 1000))


def _order(variants: tuple[str, ...], r: int) -> tuple[str, ...]:
    """Round r's order: A B C, then C B A, ... (no variant always first or last)."""
    return variants if r % 2 == 0 else variants[::-1]


def summary_us(samples: list[float]) -> dict[str, Any]:
    """mean/p50/p90/p99/max in microseconds of durations in seconds."""
    return {
        "n": len(samples),
        "mean": round(statistics.fmean(samples) * 1e6, 1),
        "p50": round((common.pct(samples, 0.5) or 0) * 1e6, 1),
        "p90": round((common.pct(samples, 0.9) or 0) * 1e6, 1),
        "p99": round((common.pct(samples, 0.99) or 0) * 1e6, 1),
        "max": round(max(samples) * 1e6, 1),
    }


# -- part 1: the gate alone, in process ---------------------------------------------------


class Echo(Actor[Any]):
    """Answers every message with itself: the cost of an ask + tell through the runtime."""

    async def handle(self, msg: Any) -> Any:
        return msg


class Pairs:
    """The cache-miss variant's (subject, project) pairs: distinct for EXTRA**2 (998,001)."""

    def __init__(self) -> None:
        self.i = 0

    def next(self) -> tuple[str, str]:
        i, self.i = self.i, self.i + 1
        return f"u{i % EXTRA}", f"p{(i // EXTRA) % EXTRA}"


async def _round_trips(
    variant: str,
    n: int,
    gate: ActorRef[Any],
    echo: ActorRef[Any],
    pairs: Pairs,
    seq: list[int],
) -> tuple[list[float], int]:
    """n + WARMUP admit + release round trips (echo: ask + tell); the timed n, refusals."""
    samples: list[float] = []
    refused = 0
    clock = time.perf_counter
    for k in range(n + WARMUP):
        seq[0] += 1
        job_id = f"job_bench{seq[0]:09d}"
        if variant == "echo":
            t0 = clock()
            await echo.ask(Request(ORG, SUBJECT, PROJECT, LIMITS))
            await echo.tell(Release(job_id))
        else:
            subject, project = (
                pairs.next() if variant == "policy_cache_miss" else (SUBJECT, PROJECT)
            )
            t0 = clock()
            decision = await admit(gate, Request(ORG, subject, project, LIMITS), job_id)
            await gate.tell(Release(job_id))
            refused += not decision.allowed
        if k >= WARMUP:
            samples.append(clock() - t0)
    return samples, refused


async def gate_phase(n: int, rounds: int) -> dict[str, Any]:
    platform = platform_caps(Settings.model_construct())  # the defaults, as the servers get
    doc = bench_doc()
    samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
    refused = dict.fromkeys(VARIANTS, 0)
    pairs, seq = Pairs(), [0]
    with tempfile.TemporaryDirectory(prefix="runplane-bench-admission-") as tmp:
        store = open_store(None, Path(tmp) / "data")
        await store.open()
        try:
            supervisor = Supervisor(
                [
                    ChildSpec(
                        "admission",
                        lambda: AdmissionActor(store, platform, use_docs=True),
                        mailbox_capacity=4096,
                    ),
                    ChildSpec("echo", Echo, mailbox_capacity=4096),
                ],
                name="bench",
            )
            async with trio.open_nursery() as nursery:
                await nursery.start(supervisor.run)
                gate = cast(ActorRef[Any], supervisor.child("admission"))
                echo = cast(ActorRef[Any], supervisor.child("echo"))
                for r in range(rounds):
                    per_round = n * (r + 1) // rounds - n * r // rounds
                    for variant in _order(VARIANTS, r):
                        if variant == "no_policy":
                            await put_policy(gate, PolicyDoc(ORG))  # empty: removes the doc
                        elif variant != "echo":
                            await put_policy(gate, doc)  # (and clears the actor's cache)
                        got, bad = await _round_trips(variant, per_round, gate, echo, pairs, seq)
                        samples[variant] += got
                        refused[variant] += bad
                await supervisor.stop()
        finally:
            await store.close()
    out = {v: {**summary_us(samples[v]), "refused": refused[v]} for v in VARIANTS}
    out["echo"].pop("refused")
    return {
        "admit_us": out,
        "decision_us": decision_only(platform, doc, min(n, 20000)),
        "platform": platform,
        "doc_entries": {"projects": len(doc.projects), "users": len(doc.users)},
    }


def decision_only(platform: dict[str, int], doc: PolicyDoc, n: int) -> dict[str, float]:
    """Mean microseconds of the gate's pure work per request, no actor: the clamp against
    cached ceilings, and the fold + ceilings + clamp of a cache miss."""
    platform_ceilings = ceilings(effective(platform, None), platform)
    doc_ceilings = ceilings(effective(platform, doc, subject=SUBJECT, project=PROJECT), platform)
    pairs = Pairs()
    miss_pairs = [pairs.next() for _ in range(n)]

    def timed(fn: Callable[[int], object]) -> float:
        t0 = time.perf_counter()
        for i in range(n):
            fn(i)
        return round((time.perf_counter() - t0) / n * 1e6, 2)

    def miss(i: int) -> object:
        subject, project = miss_pairs[i]
        eff = effective(platform, doc, subject=subject, project=project)
        return clamp(LIMITS, ceilings(eff, platform))

    return {
        "no_policy": timed(lambda _: clamp(LIMITS, platform_ceilings)),
        "policy": timed(lambda _: clamp(LIMITS, doc_ceilings)),
        "policy_cache_miss": timed(miss),
    }


# -- part 2: the whole submit over HTTP ---------------------------------------------------


def _call(srv: common.Server, method: str, path: str, body: Any, token: str = "") -> Any:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(
        srv.url.rstrip("/") + path, data=json.dumps(body).encode(), headers=headers, method=method
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def submit_round(policy: bool, seconds: float, conns: int) -> dict[str, Any]:
    """One fresh server, optionally given the policy document, then submit load."""
    env = {"RUNPLANE_MAX_CONCURRENT_ORG": "0", "RUNPLANE_ADMIN_TOKEN": ADMIN_TOKEN}
    with common.server(env=env) as srv:
        if policy:
            put = _call(srv, "PUT", f"/v1/policy?org={ORG}", POLICY, ADMIN_TOKEN)
            assert put["policy"]["users"] == POLICY["users"], put
        cpu0 = common.proc_stat(srv.pid).cpu_sec
        load = common.http_load(
            srv.pid,
            srv.port,
            path="/v1/jobs",
            method="POST",
            body=BODY,
            connections=conns,
            seconds=seconds,
        )
        cpu = common.proc_stat(srv.pid).cpu_sec - cpu0
        with sqlite3.connect(f"file:{srv.db_path()}?mode=ro", uri=True, timeout=5) as db:
            stored = db.execute("SELECT count(*) FROM jobs").fetchone()[0]
        # the gate applied the document: a cpu request above the org layer is clamped
        probe = json.loads(BODY) | {"limits": {"cpu_cores": 100}}
        notes = _call(srv, "POST", "/v1/jobs", probe)["clamp_notes"]
    accepted = load["statuses"].get("202", 0)
    return {
        "jobs_per_s": round(accepted / load["seconds"], 1),
        "accepted": accepted,
        "refused": sum(n for s, n in load["statuses"].items() if s != "202"),
        "latency_ms": {k: load["latency"][k] for k in ("p50_ms", "p99_ms", "max_ms")},
        "server_cpu_share": load["server_cpu_share"],
        "jobs_stored": stored,
        "server_cpu_us_per_submit": round(cpu * 1e6 / stored) if stored else None,
        "probe_clamp_notes": notes,
    }


def submit_phase(rounds: int, seconds: float, conns: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"no_policy": [], "policy": []}
    for r in range(rounds):
        for variant in _order(tuple(runs), r):
            runs[variant].append(submit_round(variant == "policy", seconds, conns))
    out: dict[str, Any] = {}
    for variant, got in runs.items():
        cpu = [r["server_cpu_us_per_submit"] for r in got if r["server_cpu_us_per_submit"]]
        out[variant] = {
            "jobs_per_s": round(statistics.median(r["jobs_per_s"] for r in got), 1),
            "server_cpu_us_per_submit": round(statistics.median(cpu)) if cpu else None,
            "refused": sum(r["refused"] for r in got),
            "rounds": got,
        }
    # the A/B figure: policy over no policy within each round (same machine state), median
    pairs = list(zip(runs["no_policy"], runs["policy"], strict=True))
    out["policy_over_no_policy"] = {
        key: round(statistics.median(b[key] / a[key] for a, b in pairs if a[key] and b[key]), 3)
        for key in ("jobs_per_s", "server_cpu_us_per_submit")
    }
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="about 40 s in all")
    parser.add_argument("--admits", type=int, default=None, help="round trips per variant")
    parser.add_argument("--rounds", type=int, default=None, help="in-process rounds")
    parser.add_argument("--http-rounds", type=int, default=None, help="HTTP rounds (servers)")
    parser.add_argument("--seconds", type=float, default=None, help="length of each HTTP round")
    parser.add_argument("--connections", type=int, default=50)
    args = parser.parse_args(argv)
    n = args.admits or (20_000 if args.quick else 100_000)
    rounds = args.rounds or (2 if args.quick else 3)
    http_rounds = args.http_rounds or (3 if args.quick else 5)
    seconds = args.seconds or (3.0 if args.quick else 8.0)
    if not (1 <= n <= 500_000 and 1 <= rounds <= 20 and 1 <= http_rounds <= 20):
        parser.error("bounded runs: --admits 1..500,000, --rounds and --http-rounds 1..20")
    if not 0 < seconds <= 120:
        parser.error("bounded runs: --seconds <= 120")
    started = time.monotonic()
    result: dict[str, Any] = {
        "bench": "admission",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {
            "admits_per_variant": n,
            "warmup_admits": WARMUP,
            "rounds": rounds,
            "store": "sqlite (fresh, default settings)",
            "request": {"org": ORG, "subject": SUBJECT, "project": PROJECT, "limits": LIMITS},
            "policy": POLICY,
            "caps_cache_max": CAPS_CACHE_MAX,
            "http_rounds": http_rounds,
            "http_seconds": seconds,
            "http_warmup_seconds": 1.0,
            "connections": args.connections,
            "body": BODY,
            "server_env": {"RUNPLANE_MAX_CONCURRENT_ORG": "0"},
            "nodes": 0,
        },
    }
    gate = trio.run(gate_phase, n, rounds)
    result["settings"]["platform"] = gate.pop("platform")
    result["settings"]["doc_entries"] = gate.pop("doc_entries")
    submit = submit_phase(http_rounds, seconds, args.connections)
    adm = gate["admit_us"]
    overhead = {
        v: round(adm[v]["mean"] - adm["no_policy"]["mean"], 1)
        for v in ("policy", "policy_cache_miss")
    }
    variants = ("no_policy", "policy")
    cpu = {v: submit[v]["server_cpu_us_per_submit"] for v in variants}
    gate_share = {v: round(adm[v]["mean"] / cpu[v], 3) if cpu[v] else None for v in variants}
    result.update(
        {
            "admit_mean_us": {v: adm[v]["mean"] for v in VARIANTS},
            "policy_overhead_us": overhead,
            "submit_jobs_per_s": {v: submit[v]["jobs_per_s"] for v in variants},
            "submit_cpu_us_per_submit": cpu,
            "submit_policy_over_no_policy": submit["policy_over_no_policy"],
            **gate,
            "gate_share_of_submit_cpu": gate_share,
            "submit": submit,
            "policy_applied": {v: submit[v]["rounds"][0]["probe_clamp_notes"] for v in variants},
            "targets": {
                "nothing refused": not any(adm[v].get("refused") for v in adm)
                and not any(submit[v]["refused"] for v in variants),
                "policy doc applied (cpu 100->64)": submit["policy"]["rounds"][0][
                    "probe_clamp_notes"
                ]
                == ["cpu 100->64"],
            },
        }
    )
    return common.finish(result, started)


if __name__ == "__main__":
    main()
