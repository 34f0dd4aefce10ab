"""What ``GET /metrics`` exposes (docs/operations.md "Metrics"), in Prometheus' formats.

Every figure is read at scrape time, nothing is kept for it on the request path beyond
the counters and fixed-bucket histograms the parts already hold: jobs by phase and
webhook deliveries by status (one grouped query each), placement's queue and decision
time (an ask), the fleet's nodes and committed capacity (an ask), SSE and stream
subscribers (the hub's rings), teleop frames and stream chunks (the stream service's
counters), submits and their seconds (the jobs service), mailbox depths per actor kind
(the registry and the root's singletons), and the store's commit seconds (its writer).
Labels are bounded: phases, statuses, outcomes, actor kinds; never a job or node id.
prometheus-client renders them (text 0.0.4, or OpenMetrics when the scraper asks).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from runplane.actors import placement as pl
from runplane.histogram import Histogram
from runplane.jobs.phase import Phase
from runplane.persistence import Store
from runplane.placement import NodeLoad, NodeShape
from runplane.placement.fairshare import ShareRow
from runplane.runtime import ActorError, ActorRef, Hub
from runplane.services.jobs import Jobs
from runplane.services.streams import Streams
from runplane.settings import Settings


class Root(Protocol):
    """What a scrape reads of the running tree (runplane.system.Root has it all)."""

    store: Store
    settings: Settings
    hub: Hub
    streams: Streams

    @property
    def jobs(self) -> Jobs: ...

    @property
    def placement(self) -> ActorRef[Any]: ...

    def mailboxes(self) -> dict[str, tuple[int, int]]: ...


PREFIX = "runplane_"
DELIVERY_STATUSES = ("pending", "delivered", "failed")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The figures of one scrape, gathered before rendering (collectors are sync)."""

    jobs: dict[str, int]
    deliveries: dict[str, int]
    nodes: dict[str, int]
    capacity: dict[str, tuple[float, float]]  # resource -> (capacity, committed)
    placement: pl.PlacementStats | None
    #: each org's fair-share standing (empty when placement did not answer)
    shares: list[ShareRow]
    submits: dict[str, int]
    submit_seconds: Histogram
    commit_seconds: Histogram | None
    store_pending: int
    event_followers: int
    stream_subscribers: int
    streams: dict[str, int]
    mailboxes: dict[str, tuple[int, int]]


async def _grouped(root: Root, sql: str) -> dict[str, int]:
    return {str(r["k"]): int(r["n"]) for r in await root.store.fetchall(sql)}


async def gather(root: Root) -> Snapshot:
    store = root.store
    jobs = {p.value: 0 for p in Phase}
    jobs.update(await _grouped(root, "SELECT phase AS k, COUNT(*) AS n FROM jobs GROUP BY phase"))
    deliveries = dict.fromkeys(DELIVERY_STATUSES, 0)
    if root.settings.area_enabled("webhooks"):
        deliveries.update(
            await _grouped(
                root, "SELECT status AS k, COUNT(*) AS n FROM webhook_deliveries GROUP BY status"
            )
        )
    nodes = await _grouped(root, "SELECT status AS k, COUNT(*) AS n FROM nodes GROUP BY status")
    capacity = {"cpu_cores": (0.0, 0.0), "ram_gb": (0.0, 0.0), "gpus": (0.0, 0.0)}
    # an overloaded or restarting placement: its figures are left out of this scrape
    fleet: list[tuple[NodeShape, NodeLoad]] = []
    with suppress(ActorError):
        fleet = await root.placement.try_ask(pl.FleetNow())
    stats: pl.PlacementStats | None = None
    with suppress(ActorError):
        stats = await root.placement.try_ask(pl.StatsNow())
    shares: list[ShareRow] = []
    with suppress(ActorError):
        shares = await root.placement.try_ask(pl.Shares())
    for shape, load in fleet:
        for key, cap, used in (
            ("cpu_cores", shape.cpu_cores, load.used_cpu),
            ("ram_gb", shape.ram_gb, load.used_ram),
            ("gpus", float(len(shape.gpus)), float(load.used_gpu)),
        ):
            total, committed = capacity[key]
            capacity[key] = (total + cap, committed + used)
    jobs_service = root.jobs
    store_stats = store.statistics()
    return Snapshot(
        jobs=jobs,
        deliveries=deliveries,
        nodes=nodes,
        capacity=capacity,
        placement=stats,
        shares=shares,
        submits=dict(jobs_service.submits),
        submit_seconds=jobs_service.submit_seconds.copy(),
        commit_seconds=store_stats.commit_seconds,
        store_pending=store_stats.pending,
        event_followers=root.hub.ring_subscribers("job/"),
        stream_subscribers=root.hub.ring_subscribers("stream/"),
        streams=dict(root.streams.counters),
        mailboxes=root.mailboxes(),
    )


def _histogram(name: str, doc: str, hist: Histogram) -> HistogramMetricFamily:
    family = HistogramMetricFamily(PREFIX + name, doc)
    family.add_metric([], [(le, float(n)) for le, n in hist.cumulative()], hist.total)
    return family


def _labelled(
    kind: type[GaugeMetricFamily] | type[CounterMetricFamily],
    name: str,
    doc: str,
    label: str,
    values: dict[str, int],
) -> Metric:
    family = kind(PREFIX + name, doc, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], value)
    return family


def _placement(s: Snapshot) -> Iterator[Metric]:
    if s.placement is None:
        return
    yield GaugeMetricFamily(
        PREFIX + "placement_queue_depth", "Jobs waiting for a node.", s.placement.queued
    )
    yield CounterMetricFamily(
        PREFIX + "placement_decisions", "Placement rounds planned.", s.placement.plans
    )
    yield CounterMetricFamily(
        PREFIX + "placement_decision_seconds",
        "Seconds spent planning placement rounds (rate over decisions_total: the mean).",
        s.placement.plan_seconds,
    )
    yield CounterMetricFamily(
        PREFIX + "placement_assignments", "Jobs assigned to nodes.", s.placement.assigned
    )
    yield CounterMetricFamily(
        PREFIX + "preemptions",
        "Running jobs told to stop for a waiting job of higher priority.",
        s.placement.preemptions,
    )
    yield GaugeMetricFamily(
        PREFIX + "gangs_waiting",
        "Multi-node jobs (gangs) waiting to be placed whole.",
        s.placement.gangs_waiting,
    )
    yield CounterMetricFamily(
        PREFIX + "gangs_placed",
        "Multi-node jobs placed, all ranks at once.",
        s.placement.gangs_placed,
    )


def _shares(s: Snapshot) -> Iterator[Metric]:
    """Fair share between orgs (docs/placement.md "Fair share"), without org labels (per
    org: ``GET /v1/analytics/share``): how many orgs run and wait, the largest dominant
    share, and the spread of weighted usage among the orgs that wait."""
    orgs = GaugeMetricFamily(
        PREFIX + "fair_share_orgs", "Orgs with jobs running or waiting.", labels=["state"]
    )
    orgs.add_metric(["running"], sum(1 for r in s.shares if r.running_jobs))
    orgs.add_metric(["waiting"], sum(1 for r in s.shares if r.waiting_jobs))
    yield orgs
    yield GaugeMetricFamily(
        PREFIX + "fair_share_max_share",
        "The largest dominant-resource share an org holds now (0-1).",
        max((r.share for r in s.shares), default=0.0),
    )
    waiting = [r.key for r in s.shares if r.waiting_jobs]
    yield GaugeMetricFamily(
        PREFIX + "fair_share_spread",
        "Largest minus smallest weighted usage among the orgs with waiting jobs.",
        max(waiting) - min(waiting) if len(waiting) > 1 else 0.0,
    )


def _fleet(s: Snapshot) -> Iterator[Metric]:
    capacity = GaugeMetricFamily(
        PREFIX + "fleet_capacity", "Capacity of the nodes in the fleet.", labels=["resource"]
    )
    committed = GaugeMetricFamily(
        PREFIX + "fleet_committed", "Capacity committed to running jobs.", labels=["resource"]
    )
    for resource, (total, used) in sorted(s.capacity.items()):
        capacity.add_metric([resource], total)
        committed.add_metric([resource], used)
    yield capacity
    yield committed


def _mailboxes(s: Snapshot) -> Iterator[Metric]:
    depth = GaugeMetricFamily(
        PREFIX + "mailbox_depth", "Messages queued in actors' mailboxes, by kind.", labels=["kind"]
    )
    actors = GaugeMetricFamily(PREFIX + "actors", "Live actors, by kind.", labels=["kind"])
    for kind, (count, queued) in sorted(s.mailboxes.items()):
        depth.add_metric([kind], queued)
        actors.add_metric([kind], count)
    yield depth
    yield actors


def families(s: Snapshot) -> Iterator[Metric]:
    yield _labelled(GaugeMetricFamily, "jobs", "Jobs by phase.", "phase", s.jobs)
    yield _labelled(
        CounterMetricFamily,
        "job_submits",
        "Job submits by outcome (created, refused by admission, invalid).",
        "outcome",
        s.submits,
    )
    yield _histogram("job_submit_seconds", "Seconds a job submit took.", s.submit_seconds)
    yield from _placement(s)
    yield from _shares(s)
    yield _labelled(GaugeMetricFamily, "nodes", "Nodes by status.", "status", s.nodes)
    yield from _fleet(s)
    yield GaugeMetricFamily(
        PREFIX + "sse_followers", "Open job event streams (SSE).", s.event_followers
    )
    yield GaugeMetricFamily(
        PREFIX + "stream_subscribers", "Open realtime stream followers.", s.stream_subscribers
    )
    for key, doc in (
        ("chunks", "Stream chunks received from agents."),
        ("teleop_frames", "Teleop frames sent to jobs."),
        ("teleop_failed", "Teleop frames that could not be delivered."),
        ("subscriptions", "Stream tickets minted."),
    ):
        yield CounterMetricFamily(PREFIX + "stream_" + key, doc, s.streams.get(key, 0))
    yield from _mailboxes(s)
    if s.commit_seconds is not None:
        yield _histogram(
            "store_commit_seconds",
            "Seconds from BEGIN to COMMIT of a write batch.",
            s.commit_seconds,
        )
    yield GaugeMetricFamily(
        PREFIX + "store_pending_writes", "Writes waiting for the writer.", s.store_pending
    )
    yield _labelled(
        GaugeMetricFamily,
        "webhook_deliveries",
        "Webhook deliveries by status.",
        "status",
        s.deliveries,
    )


class _Fixed(Collector):
    def __init__(self, metrics: Iterable[Metric]) -> None:
        self._metrics = list(metrics)

    def collect(self) -> Iterable[Metric]:
        return self._metrics


def render(snapshot: Snapshot, accept: str | None) -> tuple[bytes, str]:
    """The exposition of ``snapshot`` in the format ``accept`` asks for (text 0.0.4 by
    default, OpenMetrics on request), and its content type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(families(snapshot)))
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type
