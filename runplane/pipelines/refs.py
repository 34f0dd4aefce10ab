"""``{{stages.<name>.job_id}}``: a stage's reference to the job of a stage it needs, in its
command, env values and input refs, replaced when the stage launches (Argo's
``{{tasks.X.outputs}}``). An input ref that starts with ``/v1/artifacts/`` is made absolute
with the server's public origin, so the agent downloads the needed stage's artifact::

    {"type": "file", "path": "model.pt",
     "ref": "/v1/artifacts/{{stages.train.job_id}}/model.pt"}
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from runplane.runs.spec import RunSpecBody

REF = re.compile(r"\{\{\s*stages\.([^.{}\s]+)\.job_id\s*\}\}")
#: What a reference stands for while the stage is validated (a well-formed job id).
PLACEHOLDER_JOB_ID = "job_" + "0" * 26
ARTIFACTS_PREFIX = "/v1/artifacts/"


def _texts(body: RunSpecBody) -> list[str]:
    return [
        *(body.command or []),
        *body.env.values(),
        *(m.ref for m in body.inputs),
    ]


def referenced_stages(body: RunSpecBody) -> set[str]:
    """The stage names ``body`` refers to."""
    return {m.group(1) for text in _texts(body) for m in REF.finditer(text)}


def _replace(text: str, job_of: Callable[[str], str]) -> str:
    return REF.sub(lambda m: job_of(m.group(1)), text)


def resolve(
    body: Mapping[str, Any], job_of: Callable[[str], str], origin: str = ""
) -> dict[str, Any]:
    """The stage body (as JSON) with every reference replaced by ``job_of(name)`` and each
    ``/v1/artifacts/`` input ref prefixed with ``origin``; the caller validates the result
    again (it is a RunSpecBody)."""
    out = dict(body)
    if out.get("command"):
        out["command"] = [_replace(c, job_of) for c in out["command"]]
    if out.get("env"):
        out["env"] = {k: _replace(v, job_of) for k, v in out["env"].items()}
    inputs = []
    for mount in out.get("inputs") or []:
        ref = _replace(mount.get("ref", ""), job_of)
        if origin and ref.startswith(ARTIFACTS_PREFIX) and mount.get("type") != "inline":
            ref = origin.rstrip("/") + ref
        inputs.append({**mount, "ref": ref})
    if "inputs" in out:
        out["inputs"] = inputs
    return out
