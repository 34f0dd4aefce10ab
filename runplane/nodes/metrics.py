"""Node metrics: every :data:`SAMPLE_SEC` the server samples each connected node's
committed load (the CPU cores, RAM GB and GPUs its jobs hold, its active jobs, and
``load``: the peak utilization over CPU, RAM and job slots) into ``node_samples``, all
nodes in one batched write that also drops samples older than :data:`KEEP_MS`; ``GET
/v1/nodes/{id}/metrics`` answers a window of them with the node's raw reported maxima."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from runplane.persistence import Store, Tx
from runplane.placement import NodeLoad, NodeShape
from runplane.problems import not_found
from runplane.timefmt import window_ms

from .facts import NodeFacts

SAMPLE_SEC = 30.0
KEEP_MS = 48 * 3_600_000
DEFAULT_WINDOW = "1h"
MAX_WINDOW_MS = 24 * 3_600_000

Sample = tuple[str, int, int, int, int, int, float]


def sample_of(shape: NodeShape, load: NodeLoad, ts: int) -> Sample:
    """One row of ``node_samples`` for a node (its effective shape) and its load."""
    shares = [
        load.used_cpu / shape.cpu_cores if shape.cpu_cores else 0.0,
        load.used_ram / shape.ram_gb if shape.ram_gb else 0.0,
        load.active_jobs / shape.max_concurrency if shape.max_concurrency else 0.0,
    ]
    peak = min(1.0, max(shares))
    return (
        shape.id,
        ts,
        math.ceil(load.used_cpu),
        math.ceil(load.used_ram),
        load.used_gpu,
        load.active_jobs,
        round(peak, 4),
    )


def write(samples: Iterable[Sample], now: int) -> Any:
    """A transaction function: the samples in, the ones past :data:`KEEP_MS` out."""
    rows = list(samples)

    def run(tx: Tx) -> None:
        if rows:
            tx.execute_many(
                "INSERT INTO node_samples (node_id, ts, cpu, ram, gpu, jobs, load)"
                " VALUES (?,?,?,?,?,?,?) ON CONFLICT (node_id, ts) DO NOTHING",
                rows,
            )
        tx.execute("DELETE FROM node_samples WHERE ts < ?", (now - KEEP_MS,))

    return run


def parse_window(text: str) -> int:
    return window_ms(text, max_ms=MAX_WINDOW_MS, most="the most kept, 24h")


async def metrics(store: Store, node_id: str, window: str, now: int) -> dict[str, Any]:
    """NodeMetrics of ``node_id`` over the ``window`` (text) ending ``now``."""
    ms = parse_window(window)
    row = await store.fetchone("SELECT facts FROM nodes WHERE id = ?", (node_id,))
    if row is None:
        raise not_found("node")
    raw = NodeFacts.parse(row["facts"])  # before overrides: what the node reports
    samples = await store.fetchall(
        "SELECT ts, cpu, ram, gpu, jobs, load FROM node_samples"
        " WHERE node_id = ? AND ts >= ? ORDER BY ts",
        (node_id, now - ms),
    )
    return {
        "node_id": node_id,
        "window": window.strip(),
        "max_cpu": int(raw.cpu_cores),
        "max_ram": int(raw.ram_gb),
        "max_gpu": len(raw.gpus),
        "max_slots": raw.max_concurrency,
        "samples": [
            {
                "ts": int(s["ts"]),
                "cpu": int(s["cpu"]),
                "ram": int(s["ram"]),
                "gpu": int(s["gpu"]),
                "jobs": int(s["jobs"]),
                "load": float(s["load"]),
            }
            for s in samples
        ],
    }
