"""``runplane agent --executor container`` at start: accepted, refused without what it
needs (naming the package), its capabilities (``executor-container``; ``isolation-gvisor``
only after runsc's probe passed), the isolation it gives."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from runplane.agent.isolation import RunAsError, isolation_refusal
from runplane.agent.setup import SetupOptions, _check_container, settle, setup_options

from .conftest import ENFORCEMENT, runsc


def test_the_container_executor_is_an_option() -> None:
    assert setup_options(Path("/d"), None, "container", {}).executor == "container"
    assert setup_options(Path("/d"), None, "sandbox", {}).executor == "sandbox"
    assert setup_options(Path("/d"), None, "anything", {}).executor == "process"


def test_without_skopeo_and_umoci_the_agent_refuses_to_start_naming_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    only = tmp_path / "bin"
    only.mkdir()
    monkeypatch.setenv("PATH", str(only))
    with pytest.raises(RunAsError) as refused:
        _check_container("/usr/bin/bwrap", None)
    assert str(refused.value) == (
        "--executor container needs skopeo and umoci on PATH to pull and unpack images "
        "(apt-get install skopeo umoci)"
    )
    with pytest.raises(RunAsError, match="needs bubblewrap able to create namespaces"):
        _check_container(None, None)


@pytest.mark.skipif(ENFORCEMENT.bwrap is None, reason="bubblewrap cannot run here")
@pytest.mark.skipif(
    shutil.which("skopeo") is None or shutil.which("umoci") is None, reason="no skopeo/umoci"
)
def test_a_container_node_reports_its_executor_and_gvisor_when_runsc_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RP_NO_POOL", "1")  # (as root: no uid range for this test)
    (tmp_path / "data").mkdir()
    node = settle(
        SetupOptions(data_dir=tmp_path / "data", name="n1", executor="container",
                     enforce_limits=False)
    )  # fmt: skip
    capabilities = node.rules.capabilities()
    assert "executor-container" in capabilities
    found, _ = runsc()
    assert ("isolation-gvisor" in capabilities) is (found is not None)
    assert (node.rules.runsc is not None) is (found is not None)
    if found is not None:
        assert node.rules.isolation_refusal("gvisor") is None
        assert node.rules.runsc is not None
        assert node.rules.runsc.root == (tmp_path / "data" / "runsc").absolute()
    assert "cannot give isolation kata" in (node.rules.isolation_refusal("kata") or "")


def test_kata_is_refused_naming_an_installed_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "kata-runtime"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    refusal = isolation_refusal("kata", "n1", "container", frozenset({"gvisor"}))
    assert refusal == (
        "node n1 cannot give isolation kata: its container executor runs jobs in their images "
        "with bubblewrap; a kata runtime is installed, but runplane does not run kata yet; "
        "kata needs a node with the capability isolation-kata"
    )
    assert isolation_refusal("gvisor", "n1", "container", frozenset({"gvisor"})) is None
