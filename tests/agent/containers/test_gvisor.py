"""``isolation: gvisor`` with the real runsc: the probe the agent runs at start, a job whose
kernel is gVisor's (``uname -r``, ``dmesg``) in the same rootfs and mounts as bubblewrap
gives, no_internet as loopback only, and a cancel that leaves no runsc container or
process behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from runplane.agent.jobplan import NodeRules

from .conftest import Node, image, runsc
from .test_container import _cancel_when_started, _processes_naming

found, why = runsc()
pytestmark = pytest.mark.skipif(found is None, reason=f"gVisor cannot run here: {why}")


def test_the_probe_finds_runsc_and_the_node_reports_isolation_gvisor() -> None:
    assert found is not None
    assert found.version
    rules = NodeRules(node="n1", executor="container", runsc=found)
    assert "isolation-gvisor" in rules.capabilities()
    assert "executor-container" in rules.capabilities()
    assert rules.isolation_refusal("gvisor") is None
    without = NodeRules(node="n1", executor="container")
    assert without.capabilities().count("isolation-gvisor") == 0
    assert "has no runsc that passed its probe" in (without.isolation_refusal("gvisor") or "")


async def test_a_gvisor_job_runs_on_gvisors_kernel_in_its_image(node: Node, tmp_path: Path) -> None:
    rootfs = image(tmp_path)
    script = "cat /marker; uname -r; dmesg | head -1; echo out > /work/o; id -u"
    spec = node.spec("gv", ["sh", "-c", script], rootfs, isolation="gvisor")
    finished = await node.run(spec)
    assert finished.outcome == "succeeded", node.lines
    out = node.out()
    assert out[0] == "runplane-image-marker"
    assert out[1] == "4.4.0"
    assert "gVisor" in out[2]
    assert found is not None
    system = [line[1] for line in node.lines if line[0] == "system"]
    assert f"runs in {rootfs.digest} with gVisor (runsc {found.version})" in system
    workdir = node.workdirs["gv"]
    assert (workdir / "o").read_text() == "out\n"
    if node.user is not None:
        assert out[3] == str(node.user.uid)
        assert (workdir / "o").stat().st_uid == node.user.uid
    assert _containers() == []


async def test_a_gvisor_job_without_internet_has_loopback_only(node: Node, tmp_path: Path) -> None:
    from runplane.agent.protocol import RunLimits

    rootfs = image(tmp_path)
    script = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"
    spec = node.spec(
        "gvoff", ["sh", "-c", script], rootfs, isolation="gvisor",
        limits=RunLimits(no_internet=True),
    )  # fmt: skip
    assert (await node.run(spec)).outcome == "succeeded", node.lines
    assert node.out() == ["lo"]


async def test_a_cancelled_gvisor_job_leaves_nothing(node: Node, tmp_path: Path) -> None:
    rootfs = image(tmp_path)
    spec = node.spec("gvcancel", ["sh", "-c", "sleep 300"], rootfs, isolation="gvisor")
    finished = await _cancel_when_started(node, spec)
    assert finished.outcome == "cancelled"
    assert _processes_naming("runplane-job_gvcancel-") == []
    assert _containers() == []


async def test_a_gvisor_job_without_an_image_is_refused(node: Node) -> None:
    spec = node.spec("gvhost", ["true"], None, isolation="gvisor")
    finished = await node.run(spec)
    assert finished.outcome == "failed"
    assert finished.error == (
        "isolation gvisor runs a job in its image: this job has none (set its image)"
    )


def _containers() -> list[str]:
    """The runsc containers the test agent's state dir still lists."""
    assert found is not None
    done = subprocess.run(
        [found.path, "--root", str(found.root), "list", "--quiet"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return [c for c in done.stdout.split() if not c.startswith("runplane-probe")]
