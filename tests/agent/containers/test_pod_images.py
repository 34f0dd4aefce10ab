"""A pod of images: each service in its own image (its own ``/marker``), the two talking
over localhost (busybox ``nc``), in the node's network or, without internet, in a network
namespace of the pod's own; a cancel stops it all and the holder goes with it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio

from runplane.agent.execspec import Event, Finished, PodHealth, PodService, Started
from runplane.agent.protocol import RunLimits

from .conftest import Node, image
from .test_container import _processes_naming


def _services(tmp_path: Path, port: int) -> tuple[PodService, PodService]:
    server = PodService(
        name="server",
        command=[
            "sh",
            "-c",
            f"cat /marker; (sleep 0.3; touch /work/server.up) & nc -l -p {port} > /work/got; "
            "exec sleep 300",
        ],
        image=image(tmp_path, "server-image-marker"),
        # runs in the server's image: /work is the pod's directory there, not on the node
        health=PodHealth(["test", "-f", "/work/server.up"], 0.1, 5, 100),
    )
    client = PodService(
        name="client",
        command=[
            "sh",
            "-c",
            'cat /marker; echo "pod dir $RUNPLANE_POD_DIR"; '
            "echo nets: $(tail -n +3 /proc/net/dev | cut -d: -f1); "
            f"until echo hello-over-localhost | nc 127.0.0.1 {port}; do sleep 0.1; done; "
            "exec sleep 300",
        ],
        image=image(tmp_path, "client-image-marker"),
        needs=("server",),
    )
    return server, client


@pytest.mark.parametrize("offline", [False, True], ids=["node-network", "own-network"])
async def test_two_services_in_two_images_talk_over_localhost(
    node: Node, tmp_path: Path, offline: bool
) -> None:
    port = _free_port()
    limits = RunLimits(no_internet=True) if offline else None
    spec = node.spec("pod", [], None, pod=_services(tmp_path, port), limits=limits)
    got = node.workdirs["pod"] / "got"
    cancel, ready = trio.Event(), trio.Event()
    result: list[Finished] = []

    async def seen(event: Event) -> None:
        if (isinstance(event, Started) and event.ready) or isinstance(event, Finished):
            ready.set()

    async def run() -> None:
        result.append(await node.run(spec, cancel, seen))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await ready.wait()
            for _ in range(500):  # (real time: the services' own processes)
                if result or await _arrived(got):
                    break
                await trio.sleep(0.1)
            cancel.set()
    assert result[0].outcome == "cancelled", node.lines
    assert (await trio.Path(got).read_text()) == "hello-over-localhost\n", node.lines
    tagged = [line for line in node.lines if len(line) == 3 and line[0] == "stdout"]
    assert ("stdout", "server-image-marker", "server") in tagged
    assert ("stdout", "client-image-marker", "client") in tagged
    assert ("stdout", "pod dir /work", "client") in tagged
    system = [line[1] for line in node.lines if line[0] == "system"]
    assert any(t.startswith("service server is up: health check passed") for t in system)
    nets = next(line[1] for line in tagged if line[1].startswith("nets:"))
    assert (nets == "nets: lo") is offline
    assert _processes_naming(str(node.workdirs["pod"])) == []


async def test_a_pod_under_gvisor_is_refused_saying_why(node: Node, tmp_path: Path) -> None:
    spec = node.spec("gvpod", [], None, pod=_services(tmp_path, 1), isolation="gvisor")
    finished = await node.run(spec)
    assert finished.outcome == "failed"
    assert finished.error is not None
    assert finished.error.startswith("a pod cannot run under isolation gvisor yet")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _arrived(path: Path) -> bool:
    file = trio.Path(path)
    return await file.exists() and "hello" in await file.read_text()
