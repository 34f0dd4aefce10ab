"""Draining: a stopping agent takes no new work, lets its jobs finish up to the drain
timeout, hands back those still running (``job_released``, never ``job_finished
cancelled``) and stops; an older server that does not know ``draining`` is drained
without. Against the in-test server harness of ``test_client``; jobs are real processes
that wait for a file, not for time."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import trio

from runplane.agent.protocol import (
    Draining,
    Hello,
    JobFinished,
    JobLogs,
    JobPhase,
    JobReleased,
)
from tests.agent.test_client import (
    WAIT_SEC,
    FakeServer,
    agent_until,
    alive,
    make_agent,
    run_msg,
)
from tests.agent.test_client_cli import Cli

#: A job that says its pid, then runs until a file named ``go`` appears in its workdir.
WAIT_FOR_GO = ["sh", "-c", "echo $$; while [ ! -e go ]; do sleep 0.05; done; echo done"]
LONG = ["sh", "-c", "echo $$; exec sleep 600"]


def system_lines(server: FakeServer, job_id: str = "job_1") -> list[str]:
    return [
        text
        for m in server.of(JobLogs)
        if m.job_id == job_id
        for stream, text in m.lines
        if stream == "system"
    ]


def kinds(server: FakeServer) -> list[str]:
    return [r.msg.type for r in server.received]


async def test_drain_lets_a_running_job_finish_with_its_real_outcome(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server)
    with trio.fail_after(WAIT_SEC):
        async with trio.open_nursery() as inner:
            await inner.start(agent.run)
            await server.send(run_msg(WAIT_FOR_GO))
            await server.until(lambda: bool(server.stdout()))
            agent.drain(30)
            notice = await server.wait(Draining)
            assert 0 < notice.deadline_sec <= 30
            assert agent.statistics().draining
            (agent.work_root / "job_1" / "1" / "go").touch()
            # run() returns by itself once the job ended and its finish was acked
    assert [f.outcome for f in server.of(JobFinished)] == ["succeeded"]
    assert server.of(JobReleased) == []
    assert server.stdout()[1:] == ["done"]
    await server.until(lambda: bool(server.closes))
    assert server.closes == [(1000, "agent stopping")]


async def test_a_job_still_running_at_the_deadline_is_stopped_and_handed_back(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server)
    with trio.fail_after(WAIT_SEC):
        async with trio.open_nursery() as inner:
            await inner.start(agent.run)
            await server.send(run_msg(LONG))
            await server.until(lambda: bool(server.stdout()))
            agent.drain(0)
    assert not alive(int(server.stdout()[0]))
    assert server.of(JobReleased) == [JobReleased(job_id="job_1", attempt=1)]
    assert server.of(JobFinished) == []  # not a cancel
    assert kinds(server).index("draining") < kinds(server).index("job_released")
    assert any(
        "agent shutting down (drain timeout of 0 s passed)" in line for line in system_lines(server)
    )
    assert server.closes == [(1000, "agent stopping")]


async def test_a_second_drain_hands_back_at_once(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server)
    with trio.fail_after(WAIT_SEC):
        async with trio.open_nursery() as inner:
            await inner.start(agent.run)
            await server.send(run_msg(LONG))
            await server.until(lambda: bool(server.stdout()))
            agent.drain(600)
            await server.wait(Draining)
            agent.drain()  # as a second SIGTERM: do not wait the 600 s
    assert server.of(JobReleased) == [JobReleased(job_id="job_1", attempt=1)]
    assert server.of(JobFinished) == []
    assert any("stop requested again" in line for line in system_lines(server))


async def test_a_run_arriving_while_draining_is_handed_back_unstarted(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server)
    with trio.fail_after(WAIT_SEC):
        async with trio.open_nursery() as inner:
            await inner.start(agent.run)
            await server.send(run_msg(LONG))
            await server.until(lambda: bool(server.stdout()))
            agent.drain(600)
            await server.wait(Draining)
            await server.send(run_msg(["echo", "never"], job_id="job_2"))
            await server.wait(JobReleased, lambda m: m.job_id == "job_2")
            assert [m for m in server.of(JobPhase) if m.job_id == "job_2"] == []
            assert agent.statistics().running == (("job_1", 1),)
            agent.drain()
    released = {(m.job_id, m.attempt) for m in server.of(JobReleased)}
    assert released == {("job_1", 1), ("job_2", 1)}
    assert not (agent.work_root / "job_2").exists()


async def test_drain_before_the_first_welcome_is_said_after_it(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery, reject_status=503)
    agent = make_agent(tmp_path, server, backoff_min=0.05, backoff_max=0.05)
    with trio.fail_after(WAIT_SEC):
        async with trio.open_nursery() as inner:
            inner.start_soon(agent.run)
            await server.until(lambda: len(server.attempts) >= 1)
            agent.drain(600)
    # nothing ran: it stops without ever being welcomed
    assert server.hellos() == []
    assert agent.statistics().draining


async def test_an_older_server_that_does_not_know_draining_is_drained_without_it(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery, unknown_types=("draining", "job_released"))
    agent = make_agent(tmp_path, server)
    with trio.fail_after(WAIT_SEC):
        async with trio.open_nursery() as inner:
            await inner.start(agent.run)
            await server.send(run_msg(LONG))
            await server.until(lambda: bool(server.stdout()))
            agent.drain(600)
            await server.wait(Draining, conn=0)
            # the old server closed with 4400; the agent reconnects, still holding the job
            hello = await server.wait(Hello, conn=1)
            assert [(r.job_id, r.attempt) for r in hello.running] == [("job_1", 1)]
            await agent_until(agent, lambda: agent.statistics().connected)
            agent.drain()
    assert not alive(int(server.stdout()[0]))
    assert server.of(Draining, conn=1) == []
    # stopped and not reported: the old server requeues it when it declares the node lost
    assert server.of(JobReleased) == []
    assert server.of(JobFinished) == []


def test_a_negative_drain_timeout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="drain timeout"):
        make_agent(tmp_path, FakeServer(), drain_timeout=-1)


# --------------------------------------------------------------------------- the CLI


async def test_cli_sigterm_drains_and_a_second_sigterm_hands_back_at_once(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    cli = Cli(tmp_path)
    try:
        proc = await cli.start(
            "--server", server.url, "--data-dir", str(cli.data_dir), "--drain-timeout", "600"
        )
        await server.until(lambda: len(server.hellos()) == 1, within=WAIT_SEC)
        await server.send(run_msg(LONG))
        await server.until(lambda: bool(server.stdout()), within=WAIT_SEC)
        proc.send_signal(signal.SIGTERM)
        notice = await server.wait(Draining, within=WAIT_SEC)
        assert 0 < notice.deadline_sec <= 600
        proc.send_signal(signal.SIGTERM)
        assert await cli.wait() == 0
    finally:
        cli.kill()
    assert server.of(JobReleased) == [JobReleased(job_id="job_1", attempt=1)]
    assert server.of(JobFinished) == []
    assert not alive(int(server.stdout()[0]))
    records = {r["msg"]: r for r in cli.records()}
    assert records["stop requested"]["drain_timeout_sec"] == 600
    assert "second signal: handing back the running jobs now" in records
    assert records["job handed back"]["job_id"] == "job_1"
    assert [r["msg"] for r in cli.records()][-1] == "agent stopped"


async def test_cli_refuses_a_negative_drain_timeout(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    await cli.start("--server", "http://127.0.0.1:1", "--drain-timeout", "-1")
    assert await cli.wait() == 2
    assert "--drain-timeout: must be 0 or more seconds" in cli.lines()[-1]
