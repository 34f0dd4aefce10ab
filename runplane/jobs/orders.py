"""The agent's orders for a job: what to run (``Run``) and what to stop (``Cancel``),
built from the job's row (``runplane/agent/protocol.py`` is the wire format)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from runplane import vault
from runplane.agent import protocol as p
from runplane.jobs.demand import demand_of
from runplane.jobs.rows import JobRow
from runplane.jobs.spec import SETUP_KEY, execution_env, inline_path, mount_relpath, output_glob


def _mount_order(mount: dict[str, Any], auth: Mapping[str, str]) -> p.MountSpec:
    inline = mount["type"] == "inline"
    connection = mount.get("connection_id")
    ref = mount.get("ref") or ""
    if connection and mount.get("commit"):
        # through the server's git proxy: the agent never sees the connection's secret
        ref = f"{p.SERVER_REF}{GIT_PROXY}/{connection}#{mount['commit']}"
    return p.MountSpec(
        type=mount["type"],
        path=inline_path(mount["path"]) if inline else mount_relpath(mount["path"]),
        ref=ref,
        mode=mount.get("mode") or "rw",
        auth=auth.get(connection) if connection else None,
    )


#: Where the server serves a connection's repository to its agents (runplane/http/routes/git.py).
GIT_PROXY = "/v1/git/proxy"


def connection_ids(spec: Mapping[str, Any]) -> set[str]:
    """The git connections a job's mounts clone with (their credentials go in its order)."""
    mounts = [spec.get("workspace"), *(spec.get("inputs") or [])]
    return {m["connection_id"] for m in mounts if m and m.get("connection_id")}


def run_order(
    row: JobRow,
    attempt: int,
    auth: Mapping[str, str] | None = None,
    secrets: Mapping[str, str] | None = None,
    masked: Iterable[str] = (),
) -> p.Run:
    """The agent's run order: command, environment, and the mounts it prepares while the job
    is ``pulling`` (inline code included, so ``inline_files`` stays empty) and the output
    globs it uploads after the command ends. ``auth``: git connection id -> the HTTP
    Authorization header its mounts fetch with through the server's git proxy (the
    attempt's short-lived ticket; held in memory by the agent). ``secrets``: the values of
    the org secrets the env references (``${secrets.NAME}``), put in for this attempt and
    listed for the agent to mask, with ``masked`` (the spec's sealed plain values, opened
    in ``row``)."""
    secrets = secrets or {}
    spec = row.spec
    timeout = (spec.get("limits") or {}).get("timeout_sec") or None
    workspace = spec.get("workspace")
    inputs = [m for m in spec.get("inputs") or [] if m]
    return p.Run(
        job_id=row.id,
        attempt=attempt,
        spec=p.RunSpec(
            command=spec["command"],
            env=vault.substitute(execution_env(row.id, spec), secrets),
            setup=(spec.get("env") or {}).get(SETUP_KEY) or None,
            timeout_sec=timeout,
            workspace=_mount_order(workspace, auth or {}) if workspace else None,
            inputs=[_mount_order(m, auth or {}) for m in inputs],
            outputs=[
                p.OutputGlob(
                    artifact=o["artifact"],
                    glob=output_glob(o["glob"]),
                    optional=bool(o.get("optional")),
                )
                for o in spec.get("outputs") or []
            ],
            isolation=_isolation(spec.get("isolation")),
            limits=_limits(row),
            pod=_pod(spec.get("pod"), secrets),
            mask=vault.maskable([*secrets.values(), *masked]) or None,
        ),
    )


def _pod(
    pod: list[dict[str, Any]] | None, secrets: Mapping[str, str]
) -> list[p.PodServiceSpec] | None:
    """A session's pod as the agent runs it (``runplane/agent/pod.py``), each service's
    ``${secrets.NAME}`` references put in; None otherwise."""
    if not pod:
        return None
    return [
        p.PodServiceSpec(
            name=s["name"],
            command=list(s["command"]),
            env=vault.substitute(s.get("env") or {}, secrets),
            needs=list(s.get("needs") or []),
            health=p.PodHealthSpec(**s["health"]) if s.get("health") else None,
        )
        for s in pod
    ]


def _limits(row: JobRow) -> p.RunLimits | None:
    """What the agent enforces: the limits given, and the GPUs to assign (the job's GPU
    reservation: ``gpu_count``, or one for ``requires.gpu.required``); None when none."""
    limits = row.spec.get("limits") or {}
    gpus = demand_of(row.id, row.priority, row.spec).gpus
    order = p.RunLimits(
        ram_gb=limits.get("ram_gb") or 0,
        cpu_cores=limits.get("cpu_cores") or 0,
        pids=limits.get("pids") or 0,
        gpus=gpus,
        no_internet=bool(limits.get("no_internet")),
        egress_allow=list(limits.get("egress_allow") or []),
    )
    return order if order != p.RunLimits() else None


def _isolation(value: object) -> Literal["gvisor", "kata"] | None:
    """The sandbox a run order asks for: only a real one (``none`` is not sent)."""
    if value == "gvisor":
        return "gvisor"
    if value == "kata":
        return "kata"
    return None


def cancel_order(job_id: str, attempt: int) -> p.Cancel:
    return p.Cancel(job_id=job_id, attempt=attempt)
