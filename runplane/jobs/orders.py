"""The agent's orders for a job: what to run (``Run``) and what to stop (``Cancel``),
built from the job's row (``runplane/agent/protocol.py`` is the wire format)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from runplane import vault
from runplane.agent import protocol as p
from runplane.jobs.demand import demand_of
from runplane.jobs.jobspec import ContainerImage, JobSpec, PodHealth, PodService, StoredMount
from runplane.jobs.rows import JobRow
from runplane.jobs.spec import SETUP_KEY, execution_env, inline_path, mount_relpath, output_glob


def _mount_order(mount: StoredMount, auth: Mapping[str, str]) -> p.MountSpec:
    inline = mount.type == "inline"
    connection = mount.connection_id
    ref = mount.ref
    if connection and mount.commit:
        # through the server's git proxy: the agent never sees the connection's secret
        ref = f"{p.SERVER_REF}{GIT_PROXY}/{connection}#{mount.commit}"
    return p.MountSpec(
        type=mount.type,
        path=inline_path(mount.path) if inline else mount_relpath(mount.path),
        ref=ref,
        mode=mount.mode,
        auth=auth.get(connection) if connection else None,
    )


#: Where the server serves a connection's repository to its agents (runplane/http/routes/git.py).
GIT_PROXY = "/v1/git/proxy"


def connection_ids(spec: JobSpec) -> set[str]:
    """The git connections a job's mounts clone with (their credentials go in its order)."""
    return spec.connection_ids()


def run_order(
    row: JobRow,
    attempt: int,
    auth: Mapping[str, str] | None = None,
    secrets: Mapping[str, str] | None = None,
    masked: Iterable[str] = (),
    images: Mapping[str, p.ImageOrder] | None = None,
) -> p.Run:
    """The agent's run order: command, environment, and the mounts it prepares while the job
    is ``pulling`` (inline code included, so ``inline_files`` stays empty) and the output
    globs it uploads after the command ends. ``auth``: git connection id -> the HTTP
    Authorization header its mounts fetch with through the server's git proxy (the
    attempt's short-lived ticket; held in memory by the agent). ``secrets``: the values of
    the org secrets the env references (``${secrets.NAME}``), put in for this attempt and
    listed for the agent to mask, with ``masked`` (the spec's sealed plain values, opened
    in ``row``). ``images``: each image the job runs in, by its resolved ``ref``, as the
    node pulls it (the images service's ``orders``: mirror, plain HTTP, the org's registry
    credential for this attempt)."""
    secrets = secrets or {}
    images = images or {}
    spec = row.spec
    return p.Run(
        job_id=row.id,
        attempt=attempt,
        spec=p.RunSpec(
            command=list(spec.command),
            env=vault.substitute(execution_env(row.id, spec), secrets),
            setup=spec.env.get(SETUP_KEY) or None,
            timeout_sec=spec.limits.timeout_sec or None,
            workspace=_mount_order(spec.workspace, auth or {}) if spec.workspace else None,
            inputs=[_mount_order(m, auth or {}) for m in spec.inputs],
            outputs=[
                p.OutputGlob(artifact=o.artifact, glob=output_glob(o.glob), optional=o.optional)
                for o in spec.outputs
            ],
            isolation=_isolation(spec.isolation),
            limits=_limits(row),
            pod=_pod(spec.pod, secrets, images),
            mask=vault.maskable([*secrets.values(), *masked]) or None,
            image=_image(spec.container, images),
        ),
    )


def _image(
    container: ContainerImage | None, images: Mapping[str, p.ImageOrder]
) -> p.ImageOrder | None:
    """The order's image for a resolved one: as ``images`` gives it, else pulled from
    where its ref names (no mirror, no credential)."""
    if container is None:
        return None
    return images.get(container.ref) or p.ImageOrder(ref=container.ref, source=container.ref)


def _pod(
    pod: list[PodService] | None,
    secrets: Mapping[str, str],
    images: Mapping[str, p.ImageOrder],
) -> list[p.PodServiceSpec] | None:
    """A session's pod as the agent runs it (``runplane/agent/pod.py``), each service's
    ``${secrets.NAME}`` references put in and its image given; None otherwise."""
    if not pod:
        return None
    return [
        p.PodServiceSpec(
            name=s.name,
            command=list(s.command),
            env=vault.substitute(s.env, secrets),
            needs=list(s.needs),
            health=_health(s.health),
            image=_image(s.container, images),
        )
        for s in pod
    ]


def _health(health: PodHealth | None) -> p.PodHealthSpec | None:
    if health is None:
        return None
    return p.PodHealthSpec(
        command=list(health.command),
        period_sec=health.period_sec,
        timeout_sec=health.timeout_sec,
        retries=health.retries,
    )


def _limits(row: JobRow) -> p.RunLimits | None:
    """What the agent enforces: the limits given, and the GPUs to assign (the job's GPU
    reservation: ``gpu_count``, or one for ``requires.gpu.required``); None when none."""
    limits = row.spec.limits
    gpus = demand_of(row.id, row.priority, row.spec).gpus
    order = p.RunLimits(
        ram_gb=limits.ram_gb or 0,
        cpu_cores=limits.cpu_cores or 0,
        pids=limits.pids or 0,
        gpus=gpus,
        no_internet=limits.no_internet,
        egress_allow=list(limits.egress_allow),
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
