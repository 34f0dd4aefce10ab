"""The API view of a node (``GET /v1/nodes``): facts after overrides, load, live jobs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runplane.jobs.demand import demand_of
from runplane.timefmt import iso_ms_or_none

from .repo import NodeJob, NodeRow
from .shape import reliability_of, reputation_of


def _num(value: float) -> int | float:
    """Whole numbers as ints (the facts are ints; overrides may cap them)."""
    return int(value) if float(value).is_integer() else value


def _running(
    jobs: Sequence[NodeJob], org_id: str | None
) -> tuple[list[dict[str, Any]], tuple[float, float, float]]:
    """The live jobs' entries (another org's show their phase only) and what they use:
    (cpu, ram, gpus)."""
    used_cpu = used_ram = used_gpu = 0.0
    running = []
    for job in jobs:
        demand = demand_of(job.id, job.priority, job.spec)
        used_cpu += demand.cpu
        used_ram += demand.ram
        # the devices its agent assigned, once reported (the reservation until then)
        used_gpu += len(job.gpus) if job.gpus else demand.gpus
        mine = org_id is None or job.org_id == org_id
        running.append(
            {
                "job_id": job.id if mine else "",
                "stack": job.stack if mine else "",
                "phase": job.phase.value,
                # addition: the GPU devices the job holds (shown for every org's slot: a
                # device, not the job)
                "gpus": list(job.gpus),
            }
        )
    return running, (used_cpu, used_ram, used_gpu)


def node_view(
    row: NodeRow,
    jobs: Sequence[NodeJob],
    org_id: str | None,
    pending_beat: int | None = None,
) -> dict[str, Any]:
    """The view of ``row`` with its live ``jobs``, seen from ``org_id`` (None: every org;
    another org's jobs show their phase only); ``pending_beat`` is a beat (unix ms) the
    heartbeat log has not written yet, shown if newer than the row's."""
    facts = row.facts
    running, (used_cpu, used_ram, used_gpu) = _running(jobs, org_id)
    last_heartbeat = row.last_heartbeat
    if pending_beat is not None and (last_heartbeat is None or pending_beat > last_heartbeat):
        last_heartbeat = pending_beat
    return {
        "id": row.id,
        "name": row.name,
        "disabled": row.disabled,
        "tier": row.tier,
        "status": row.status,
        "agent_version": row.agent_version,
        "channel": row.channel,
        "cpu_cores": _num(facts.cpu_cores),
        "ram_gb": _num(facts.ram_gb),
        "gpus": len(facts.gpus),
        "max_vram_gb": _num(facts.max_vram_gb),
        "gpu_models": [
            {"model": g.model, "vendor": g.vendor, "vram_gb": _num(g.vram_gb), "cuda": g.cuda}
            for g in facts.gpus
        ],
        "arch": facts.arch,
        "os": facts.os,
        "max_concurrency": facts.max_concurrency,
        "used_cpu": round(used_cpu),
        "used_ram": round(used_ram),
        "used_gpu": int(used_gpu),
        "running_jobs": running,
        "dlperf": facts.dlperf,
        "reputation": reputation_of(row),
        "reliability": round(reliability_of(row), 4),
        "active_jobs": len(jobs),
        "last_heartbeat": iso_ms_or_none(last_heartbeat),
        # additions (docs/agent.md#self-update): whether the agent applies its channel's
        # target by itself, and how its last self-update went
        "auto_update": row.update.auto_update,
        "update": {
            "requested": row.update.target,
            "version": row.update.version,
            "phase": row.update.phase,
            "error": row.update.error,
        },
        # addition (docs/containers.md#placement): a container node's image cache
        "images": facts.images.view() if facts.images is not None else None,
    }
