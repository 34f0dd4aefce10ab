"""``isolation: gvisor``: an image job's process run by gVisor's ``runsc`` from an OCI
runtime bundle (``docs/containers.md``, Running inside the image).

The bundle's ``config.json`` shows the same as bubblewrap does (``container.py``): the
image's rootfs from the cache as ``/``, read-only; ``/work`` (the job's working directory)
and ``/streams`` bound read-write; ``/tmp``, ``/run`` and ``/dev/shm`` tmpfs; ``/proc``;
pid, network, ipc, uts and mount namespaces. ``runsc --network=none`` for ``no_internet``
(loopback only), else ``--network=host`` (gVisor's own network stack passes sockets to the
node's network: no veth or bridge to set up on the node). The process runs as the
attempt's uid (the image's ``User`` is not mapped under gVisor: the files it writes to
``/work`` must be the attempt's).

**Limits.** ``runsc run`` starts after the process has joined the job's cgroups (the
launch chain, ``launch.py``); its gofer and sandbox are its children, so the job's
memory, CPU and pids limits hold for the whole sandbox, and the agent kills all of it
through the cgroup at the end. The bundle gives no ``cgroupsPath``: runsc makes none.
**The end.** ``runsc delete --force`` of each container the job started, then its bundle
removed, whatever the outcome.

**The probe** (:func:`probe_runsc`, at agent start): a tiny bundle (the node's static
busybox if it has one, else the node's own ``/`` read-only) running ``true`` under
``runsc --network=none``, within :data:`PROBE_TIMEOUT_SEC`; only when it succeeds does the
agent report ``isolation-gvisor``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runplane.agent.launch import Runsc

log = logging.getLogger("runplane.agent")

PROBE_TIMEOUT_SEC = 20.0
_BUSYBOX = ("/bin/busybox", "/usr/bin/busybox")
_NAMESPACES = ("pid", "network", "ipc", "uts", "mount")


def bundle_config(
    *,
    root: Path,
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str,
    ids: tuple[int, int],
    binds: Sequence[tuple[str, str, bool]] = (),
    hostname: str = "job",
) -> dict[str, Any]:
    """An OCI runtime ``config.json`` for one process: ``root`` read-only as ``/``,
    ``binds`` (host path, container path, writable) on top."""
    mounts: list[dict[str, Any]] = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["mode=1777"]},
        {"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": ["mode=755"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["mode=1777"]},
    ]
    for source, destination, writable in binds:
        options = ["rbind", "rw" if writable else "ro"]
        mounts.append(
            {"destination": destination, "type": "bind", "source": source, "options": options}
        )
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": ids[0], "gid": ids[1]},
            "args": list(argv),
            "env": [f"{k}={v}" for k, v in env.items()],
            "cwd": cwd,
        },
        "root": {"path": str(root), "readonly": True},
        "hostname": hostname,
        "mounts": mounts,
        "linux": {"namespaces": [{"type": t} for t in _NAMESPACES]},
    }


def write_bundle(bundle: Path, config: Mapping[str, Any]) -> None:
    """Write ``config`` as ``bundle``/config.json (blocking; the directory made 0700)."""
    bundle.mkdir(mode=0o700, parents=True, exist_ok=True)
    (bundle / "config.json").write_text(json.dumps(config), encoding="utf-8")


def run_argv(runsc: Runsc, bundle: Path, container_id: str, *, network: bool) -> list[str]:
    """``runsc run`` of ``bundle`` as ``container_id`` (attached: it ends with the process)."""
    net = "host" if network else "none"
    run = ["run", "--bundle", str(bundle), container_id]
    return [runsc.path, "--root", str(runsc.root), f"--network={net}", *run]


def delete(runsc: Runsc, container_id: str, bundle: Path | None = None) -> None:
    """Force-delete a container (whatever is left of it) and remove its bundle (blocking)."""
    try:
        subprocess.run(
            [runsc.path, "--root", str(runsc.root), "delete", "--force", container_id],
            capture_output=True,
            timeout=PROBE_TIMEOUT_SEC,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("runsc delete failed", extra={"container": container_id, "error": str(exc)})
    if bundle is not None:
        shutil.rmtree(bundle, ignore_errors=True)


def probe_runsc(state_root: Path) -> tuple[Runsc | None, str]:
    """A :class:`Runsc` when a probe run succeeds here, else None; and why (blocking)."""
    path = shutil.which("runsc")
    if path is None:
        return None, "runsc is not on PATH (apt-get install runsc, or gVisor's release)"
    if os.geteuid() != 0:
        return None, "runsc needs an agent running as root"
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
        first = (done.stdout.splitlines() or [""])[0]
        version = first.removeprefix("runsc version ").strip() or "unknown"
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"runsc --version failed: {exc}"
    runsc = Runsc(path, version, state_root)
    state_root.mkdir(mode=0o700, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="probe-", dir=state_root) as tmp:
        why = _probe_run(runsc, Path(tmp))
    return (runsc, "") if why is None else (None, why)


def _probe_run(runsc: Runsc, tmp: Path) -> str | None:
    busybox = next((b for b in _BUSYBOX if os.path.isfile(b)), None)
    if busybox is not None:
        root = tmp / "rootfs"
        (root / "bin").mkdir(parents=True)
        shutil.copy2(busybox, root / "bin" / "busybox")
        argv = ["/bin/busybox", "true"]
    else:
        root, argv = Path("/"), ["true"]
    config = bundle_config(root=root, argv=argv, env={"PATH": "/bin:/usr/bin"}, cwd="/", ids=(0, 0))
    write_bundle(tmp / "bundle", config)
    container_id = f"runplane-probe-{os.getpid()}"
    try:
        done = subprocess.run(
            run_argv(runsc, tmp / "bundle", container_id, network=False),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT_SEC,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"a probe run of runsc took over {PROBE_TIMEOUT_SEC:g} s"
    except OSError as exc:
        return f"runsc could not start: {exc.strerror or exc}"
    finally:
        delete(runsc, container_id)
    if done.returncode != 0:
        error = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return f"a probe run of runsc failed (exit code {done.returncode}): {error[0][:300]}"
    return None
