"""Image jobs run by the executor itself (``runplane/agent/container.py``, ``gvisor.py``):
a busybox rootfs (tests/oci.py) as the image's unpacked rootfs, a real node rules' plan
(cgroups, bubblewrap, the attempt's own uid as root), real processes."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from runplane.agent.execspec import Event, ExecSpec, Finished, ImageConfig, LogLines, Rootfs
from runplane.agent.executor import run_job
from runplane.agent.gvisor import probe_runsc
from runplane.agent.isolation import JobUser, make_workdir, prepare_work_root
from runplane.agent.jobplan import NodeRules
from runplane.agent.launch import Runsc
from runplane.agent.limits import probe
from runplane.agent.protocol import RunLimits
from runplane.agent.streams import make_streams_dir
from tests.agent.workroot import reachable_work_dir
from tests.oci import busybox_rootfs

ENFORCEMENT = probe()
needs_bwrap = pytest.mark.skipif(
    ENFORCEMENT.bwrap is None, reason="bubblewrap cannot create namespaces here"
)
_RUNSC: list[tuple[Runsc | None, str]] = []


def runsc() -> tuple[Runsc | None, str]:
    """gVisor as the agent finds it (probed once per test run)."""
    if not _RUNSC:
        state = Path(tempfile.mkdtemp(prefix="runplane-test-runsc-"))
        _RUNSC.append(probe_runsc(state) if os.geteuid() == 0 else (None, "not root"))
    return _RUNSC[0]


def image(
    root: Path,
    marker: str = "runplane-image-marker",
    files: Mapping[str, str] | None = None,
    **config: Any,
) -> Rootfs:
    """A busybox rootfs holding ``/marker`` (the unpacked image) with ``config``."""
    path = busybox_rootfs(root / f"image-{marker}", marker, files)
    config.setdefault("env", ("PATH=/bin",))
    digest = "sha256:" + marker.encode().hex().ljust(64, "0")[:64]
    return Rootfs(digest=digest, path=path, config=ImageConfig(**config))


@dataclass
class Node:
    """A container node's rules over a reachable work root, and the jobs it ran."""

    root: Path
    user: JobUser | None
    rules: NodeRules
    lines: list[tuple[str, ...]] = field(default_factory=list)
    workdirs: dict[str, Path] = field(default_factory=dict)

    def spec(self, name: str, command: list[str], rootfs: Rootfs | None, **kw: Any) -> ExecSpec:
        limits = kw.pop("limits", None)
        plan = self.rules.plan(("job", name), limits or RunLimits())
        assert plan.refusal is None and plan.hand_back is None, plan
        workdir = self.root / name / "1"
        make_workdir(workdir, self.root)
        self.workdirs[name] = workdir
        streams = make_streams_dir(workdir, self.user)
        return ExecSpec(
            job_id=f"job_{name}",
            command=command,
            env={**plan.env, **kw.pop("env", {})},
            workdir=workdir,
            user=self.user,
            launch=plan.launch,
            streams_dir=streams,
            image=rootfs,
            grace_sec=kw.pop("grace_sec", 1.0),
            **kw,
        )

    async def run(self, spec: ExecSpec, cancel: Any = None, seen: Any = None) -> Finished:
        async def report(event: Event) -> None:
            if isinstance(event, LogLines):
                self.lines.extend(event.lines)
            if seen is not None:
                await seen(event)

        try:
            return await run_job(spec, report, cancel)
        finally:
            self.rules.release(("job", spec.job_id.removeprefix("job_")))

    def out(self, stream: str = "stdout") -> list[str]:
        return [line[1] for line in self.lines if line[0] == stream]


@pytest.fixture
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Node]:
    if ENFORCEMENT.bwrap is None:
        pytest.skip("bubblewrap cannot create namespaces here")
    user = request.getfixturevalue("range_uid") if os.geteuid() == 0 else None
    root = prepare_work_root(tmp_path / "agent", user, reachable_work_dir())
    found, _ = runsc()
    rules = NodeRules(
        node="n1",
        executor="container",
        enforcement=ENFORCEMENT,
        user=user,
        hidden=(root,),
        runsc=found,
    )
    yield Node(root, user, rules)
    shutil.rmtree(root, ignore_errors=True)
