"""``effective_manifest``: what a subject may launch with a stack under its ceilings.

The stack's config surface (its declared fields) with each resource dimension bounded by
the stack's own requirement below and the admission ceiling above; ``launchable`` is false
(with problems saying why) when the stack needs more than the ceilings allow.
"""

from __future__ import annotations

from typing import Any

from runplane.policy.caps import Caps
from runplane.stacks import Stack


def effective_manifest(stack: Stack, caps: Caps) -> dict[str, Any]:
    req = stack.requires
    problems: list[dict[str, str]] = []
    if req.gpu.required and caps["max_gpu"] < 1:
        problems.append(
            {
                "key": "gpu_count",
                "code": "over_ceiling",
                "message": f"stack {stack.name!r} needs a GPU and max_gpu is 0 "
                f"({caps.provenance['max_gpu']} layer)",
            }
        )
    if req.cpu.min_cores > caps["max_cpu"]:
        problems.append(
            {
                "key": "cpu_cores",
                "code": "over_ceiling",
                "message": f"stack {stack.name!r} needs {req.cpu.min_cores} cores and max_cpu "
                f"is {caps['max_cpu']} ({caps.provenance['max_cpu']} layer)",
            }
        )
    if req.ram.min_gb > caps["max_ram"]:
        problems.append(
            {
                "key": "ram_gb",
                "code": "over_ceiling",
                "message": f"stack {stack.name!r} needs {req.ram.min_gb} GB of RAM and max_ram "
                f"is {caps['max_ram']} ({caps.provenance['max_ram']} layer)",
            }
        )
    return {
        "stack": stack.name,
        "modes": list(stack.modes),
        "config": [field.model_dump(mode="json") for field in stack.config],
        "resources": {
            "cpu_cores": {"min": req.cpu.min_cores, "max": caps["max_cpu"]},
            "ram_gb": {"min": req.ram.min_gb, "max": caps["max_ram"]},
            "gpu_count": {
                "min": 1 if req.gpu.required else 0,
                "max": caps["max_gpu"],
                "min_vram_gb": req.gpu.min_vram_gb,
            },
            "timeout_sec": {"max": caps["max_timeout_sec"]},
        },
        "launchable": not problems,
        "problems": problems,
    }
