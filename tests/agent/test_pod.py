"""A session's pod on the executor, with real processes: start order behind health gates,
readiness, a service that exits, a gate out of retries, teardown, lines tagged."""

from __future__ import annotations

from pathlib import Path

import trio

from runplane.agent.executor import (
    Event,
    ExecSpec,
    Finished,
    LogLines,
    PodHealth,
    PodService,
    Started,
    run_job,
)


def pod_spec(tmp_path: Path, *services: PodService, **kwargs: object) -> ExecSpec:
    options: dict[str, object] = {
        "env": {},
        "workdir": tmp_path / "work" / "job_pod",
        "grace_sec": 2.0,
    }
    options.update(kwargs)
    return ExecSpec(job_id="job_pod", command=[], pod=services, **options)  # type: ignore[arg-type]


def lines(events: list[Event]) -> list[tuple[str, ...]]:
    return [line for e in events if isinstance(e, LogLines) for line in e.lines]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


SIM = PodService(
    name="sim",
    command=[
        "sh",
        "-c",
        'echo "sim $RUNPLANE_SERVICE_NAME"; sleep 0.4; touch sim.ready; exec sleep 60',
    ],
    health=PodHealth(
        command=["test", "-f", "sim.ready"], period_sec=0.1, timeout_sec=2, retries=50
    ),
)
CTRL = PodService(
    name="ctrl",
    command=[
        "sh",
        "-c",
        'test -f sim.ready && echo "ctrl sees sim in $RUNPLANE_POD_DIR"; exec sleep 60',
    ],
    needs=("sim",),
    env={"MODE": "drive"},
)


async def test_a_service_starts_after_the_one_it_needs_passed_its_health_gate(
    tmp_path: Path,
) -> None:
    events: list[Event] = []
    cancel = trio.Event()
    ready = trio.Event()

    async def report(event: Event) -> None:
        events.append(event)
        if isinstance(event, Started) and event.ready:
            ready.set()

    result: list[Finished] = []

    async def run() -> None:
        result.append(await run_job(pod_spec(tmp_path, CTRL, SIM), report, cancel))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        with trio.fail_after(20):
            await ready.wait()
        started = [e for e in events if isinstance(e, Started)]
        pids = [e.pid for e in started if not e.ready]
        assert len(pids) == 2 and all(alive(pid) for pid in pids)
        assert [e.ready for e in started] == [False, False, True]
        text = [line[1] for line in lines(events)]
        up = next(i for i, t in enumerate(text) if t.startswith("service sim is up"))
        ctrl_runs = next(i for i, t in enumerate(text) if t.startswith("service ctrl: running"))
        assert up < ctrl_runs  # ctrl started only once sim's gate passed
        assert "pod ready: all 2 services up" in text
        workdir = str((tmp_path / "work" / "job_pod").absolute())
        said = ("stdout", f"ctrl sees sim in {workdir}", "ctrl")

        def tagged() -> set[tuple[str, ...]]:
            return {(line[0], line[1], line[2]) for line in lines(events) if len(line) == 3}

        with trio.fail_after(20):  # ctrl is up; its first line may still be on its way
            while said not in tagged():  # noqa: ASYNC110 (polls the reported lines)
                await trio.sleep(0.01)
        cancel.set()
    finished = result[0]
    assert (finished.outcome, finished.error) == ("cancelled", "cancelled")
    assert not any(alive(pid) for pid in pids)  # every service torn down
    assert ("stdout", "sim sim", "sim") in tagged()


async def test_a_service_that_exits_fails_the_pod_and_stops_the_others(tmp_path: Path) -> None:
    steady = PodService(name="steady", command=["sh", "-c", "echo $$ > steady.pid; exec sleep 60"])
    crash = PodService(name="crash", command=["sh", "-c", "sleep 0.3; exit 3"], needs=("steady",))
    events: list[Event] = []

    async def report(event: Event) -> None:
        events.append(event)

    with trio.fail_after(20):
        finished = await run_job(pod_spec(tmp_path, steady, crash), report)
    assert finished.outcome == "failed"
    assert finished.error == "service 'crash' exited (exit code 3)"
    steady_pid = int((tmp_path / "work" / "job_pod" / "steady.pid").read_text())
    assert not alive(steady_pid)


async def test_a_health_gate_out_of_retries_fails_the_pod_naming_the_service(
    tmp_path: Path,
) -> None:
    never = PodService(
        name="db",
        command=["sleep", "60"],
        health=PodHealth(
            command=["sh", "-c", "echo not yet >&2; exit 1"],
            period_sec=0.05,
            timeout_sec=1,
            retries=2,
        ),
    )
    app = PodService(name="app", command=["sleep", "60"], needs=("db",))
    events: list[Event] = []

    async def report(event: Event) -> None:
        events.append(event)

    with trio.fail_after(20):
        finished = await run_job(pod_spec(tmp_path, never, app), report)
    assert finished.outcome == "failed"
    assert finished.error is not None
    assert finished.error.startswith("service 'db': health check failed 3 times")
    assert "last output: exit code 1: not yet" in finished.error
    # app never started, and the job was never reported ready
    text = [line[1] for line in lines(events)]
    assert not any(t.startswith("service app: running") for t in text)
    assert not any(isinstance(e, Started) and e.ready for e in events)


async def test_the_timeout_stops_every_service(tmp_path: Path) -> None:
    one = PodService(name="one", command=["sleep", "60"])
    with trio.fail_after(20):
        finished = await run_job(pod_spec(tmp_path, one, timeout_sec=0.5), lambda e: _ignore(e))
    assert finished.outcome == "timeout"
    assert finished.error == "timed out after 0.5 s"


async def _ignore(event: Event) -> None:
    return None


def test_pod_env_names_are_documented() -> None:
    from runplane.agent import pod

    assert (pod.SERVICE_ENV, pod.POD_DIR_ENV) == ("RUNPLANE_SERVICE_NAME", "RUNPLANE_POD_DIR")


async def test_services_reach_each_other_on_localhost(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = PodService(
        name="web",
        command=["python3", "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        health=PodHealth(
            command=[
                "python3",
                "-c",
                f"import socket; socket.create_connection(('127.0.0.1', {port}), 1)",
            ],
            period_sec=0.1,
            timeout_sec=2,
            retries=100,
        ),
    )
    client = PodService(
        name="client",
        needs=("web",),
        command=[
            "python3",
            "-c",
            "import urllib.request, sys; "
            f"r = urllib.request.urlopen('http://127.0.0.1:{port}/'); "
            "print('status', r.status); sys.exit(3)",
        ],
    )
    events: list[Event] = []

    async def report(event: Event) -> None:
        events.append(event)

    with trio.fail_after(30):
        finished = await run_job(pod_spec(tmp_path, server, client), report)
    # the client got its answer, then exited: an exiting service ends the pod
    assert ("stdout", "status 200", "client") in lines(events)
    assert finished.error == "service 'client' exited (exit code 3)"
