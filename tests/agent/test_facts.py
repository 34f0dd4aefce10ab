"""Machine facts: parsers on sample text, probes on this machine, the dlperf cache."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
from pathlib import Path

import pytest

from runplane.agent import facts
from runplane.agent.facts import (
    collect_facts,
    detect_gpus,
    dlperf,
    dlperf_score,
    measure_unit_rate,
    normalize_arch,
    parse_cuda_version,
    parse_meminfo_gb,
    parse_nvidia_smi,
)
from runplane.agent.protocol import Gpu

NVIDIA_CSV = """\
0, GPU-5d6c1f2a-0000-4000-8000-000000000001, NVIDIA GeForce RTX 4090, 24564, 550.54.14
1, GPU-5d6c1f2a-0000-4000-8000-000000000002, NVIDIA A100-SXM4-80GB, 81920, 550.54.14
"""

NVIDIA_BANNER = """\
Tue Mar 19 10:00:00 2024
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.14              Driver Version: 550.54.14      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
"""


def test_parse_nvidia_smi_csv() -> None:
    assert parse_nvidia_smi(NVIDIA_CSV, cuda="12.4") == [
        Gpu(
            model="NVIDIA GeForce RTX 4090",
            vendor="nvidia",
            vram_gb=24,
            cuda="12.4",
            index=0,
            uuid="GPU-5d6c1f2a-0000-4000-8000-000000000001",
        ),
        Gpu(
            model="NVIDIA A100-SXM4-80GB",
            vendor="nvidia",
            vram_gb=80,
            cuda="12.4",
            index=1,
            uuid="GPU-5d6c1f2a-0000-4000-8000-000000000002",
        ),
    ]


def test_parse_nvidia_smi_skips_what_does_not_parse() -> None:
    text = (
        "No devices were found\n0, GPU-a, Tesla T4, [N/A], 535.1\n\n"
        "1, [N/A], Tesla T4, 15360, 535.1\n2, GPU-c, , 100, x\nx, GPU-d, Tesla T4, 1, 1\n"
    )
    assert parse_nvidia_smi(text) == [Gpu(model="Tesla T4", vram_gb=15, index=1)]
    assert parse_nvidia_smi("") == []


def test_parse_cuda_version() -> None:
    assert parse_cuda_version(NVIDIA_BANNER) == "12.4"
    assert parse_cuda_version("| CUDA Version: N/A |") == ""
    assert parse_cuda_version("") == ""


@pytest.mark.parametrize(
    ("machine", "arch"),
    [
        ("x86_64", "x86_64"),
        ("AMD64", "x86_64"),
        ("aarch64", "arm64"),
        ("arm64", "arm64"),
        ("riscv64", "riscv64"),
        ("", "unknown"),
    ],
)
def test_normalize_arch(machine: str, arch: str) -> None:
    assert normalize_arch(machine) == arch


def test_parse_meminfo() -> None:
    assert parse_meminfo_gb("MemTotal:       24684096 kB\nMemFree: 1 kB\n") == 24
    assert parse_meminfo_gb("MemTotal:        8029000 kB\n") == 8  # 7.66 GiB: nominal 8
    assert parse_meminfo_gb("nothing here") == 0


def _fake_nvidia_smi(bin_dir: Path, exit_code: int = 0) -> None:
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f"[ {exit_code} -ne 0 ] && exit {exit_code}\n"
        'if [ -n "$1" ]; then\n'
        f"cat <<'EOF'\n{NVIDIA_CSV}EOF\n"
        "else\n"
        f"cat <<'EOF'\n{NVIDIA_BANNER}EOF\n"
        "fi\n"
    )
    script.chmod(0o755)


def test_detect_gpus_runs_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvidia_smi(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    gpus = detect_gpus()
    assert [(g.model, g.vram_gb, g.cuda) for g in gpus] == [
        ("NVIDIA GeForce RTX 4090", 24, "12.4"),
        ("NVIDIA A100-SXM4-80GB", 80, "12.4"),
    ]


def test_a_failing_nvidia_smi_means_no_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_nvidia_smi(tmp_path / "bin", exit_code=9)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert detect_gpus() == []


def test_collect_facts_on_this_machine(tmp_path: Path) -> None:
    got = collect_facts(tmp_path / "data")
    cores = len(os.sched_getaffinity(0))
    assert got.cpu_cores == cores
    assert got.max_concurrency == cores
    assert got.name == socket.gethostname()
    assert got.ram_gb >= 1
    assert got.disk_gb >= 0
    assert got.arch in ("x86_64", "arm64")
    assert got.os == "linux"
    assert got.capabilities[0] == "process"
    assert ("git" in got.capabilities) == (shutil.which("git") is not None)
    assert got.executors == ["process"]
    assert 1 <= got.dlperf <= 1000
    cache = json.loads((tmp_path / "data" / "dlperf.json").read_text())
    assert cache["score"] == got.dlperf


def test_collect_facts_overrides(tmp_path: Path) -> None:
    got = collect_facts(tmp_path, name="gpu-box-7", max_concurrency=3)
    assert (got.name, got.max_concurrency) == ("gpu-box-7", 3)


def test_dlperf_formula_and_measurement() -> None:
    assert dlperf_score(2, 2000.0) == 20.0
    assert dlperf_score(16, 3000.0) == 240.0
    rate = measure_unit_rate(0.02)
    assert rate > 10


def test_dlperf_is_cached_for_a_day(tmp_path: Path) -> None:
    calls: list[int] = []

    def measure() -> float:
        calls.append(1)
        return 2000.0

    t0 = 1_700_000_000.0
    assert dlperf(tmp_path, 2, now=t0, measure=measure) == 20.0
    assert dlperf(tmp_path, 2, now=t0 + 3600, measure=measure) == 20.0
    assert dlperf(tmp_path, 2, now=t0 + 23.9 * 3600, measure=measure) == 20.0
    assert len(calls) == 1
    assert dlperf(tmp_path, 2, now=t0 + 24.1 * 3600, measure=measure) == 20.0
    assert len(calls) == 2  # stale: measured again
    assert dlperf(tmp_path, 4, now=t0 + 24.2 * 3600, measure=measure) == 40.0
    assert len(calls) == 3  # the core count changed
    (tmp_path / facts.DLPERF_FILE).write_text("{not json")
    assert dlperf(tmp_path, 4, now=t0 + 24.3 * 3600, measure=measure) == 40.0
    assert len(calls) == 4  # unreadable cache
    assert stat.S_ISREG((tmp_path / facts.DLPERF_FILE).stat().st_mode)


def test_collect_facts_reuses_the_cached_dlperf(tmp_path: Path) -> None:
    first = collect_facts(tmp_path)
    cache = tmp_path / facts.DLPERF_FILE
    record = json.loads(cache.read_text())
    record["score"] = 12.5
    cache.write_text(json.dumps(record))
    assert collect_facts(tmp_path).dlperf == 12.5
    assert first.dlperf > 0
