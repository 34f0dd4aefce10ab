"""The node agent against an in-test WebSocket server speaking ``runplane.agent.protocol``.

``FakeServer`` is a test harness (trio-websocket ``serve_websocket`` on 127.0.0.1:0), not the
real ``/v1/nodes/connect`` endpoint; jobs are real processes. Timing tests (heartbeats,
backoff) use the autojump clock and pass facts explicitly (no worker threads).
"""

from __future__ import annotations

import os
import random
import socket
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, WebSocketRequest, serve_websocket

from runplane import __version__
from runplane.agent import outbox, session
from runplane.agent.client import Agent, connect_url
from runplane.agent.errors import AgentError, AgentRefused, AgentReplaced, DataDirBusy
from runplane.agent.protocol import (
    PROTOCOL_VERSION,
    Cancel,
    Facts,
    FinishedAck,
    Heartbeat,
    Hello,
    JobFinished,
    JobLogs,
    JobMetric,
    JobPhase,
    ReportMark,
    Resume,
    Run,
    RunningJob,
    RunSpec,
    Welcome,
    decode_agent,
    encode,
)
from tests.agent.workroot import reachable_work_dir

M = TypeVar("M")

FACTS = Facts(
    name="test-node",
    cpu_cores=2,
    ram_gb=4,
    disk_gb=10,
    arch="x86_64",
    os="linux",
    capabilities=["process"],
    max_concurrency=2,
    dlperf=20.0,
)
REVOKED = "join token revoked or invalid: mint a new one with POST /v1/nodes/join-tokens"
WAIT_SEC = 20.0


# --------------------------------------------------------------------------- the harness


@dataclass
class Received:
    conn: int  # which connection (0 = first)
    at: float  # trio.current_time() on arrival
    msg: Any


@dataclass
class FakeServer:
    """Enough of the server side of the agent protocol to drive an agent in tests."""

    node_id: str = "node_test"
    credential: str = "rpn_test_credential"
    heartbeat_sec: float = 5.0
    auto_ack: bool = True
    refuse: tuple[int, str] | None = None  # accept, read hello, then close with this
    reject_status: int | None = None  # refuse the HTTP upgrade with this status
    reject_body: bytes = b""
    bad_welcomes: list[str] = field(default_factory=list)  # sent instead of a welcome, once each
    #: message types this server does not know: it closes with 4400, as servers did
    #: before ``draining`` (the message is recorded, then the session closed)
    unknown_types: tuple[str, ...] = ()
    #: say ``resume`` after the welcome (False: a server from before it); its marks are the
    #: last numbered report received of each attempt the hello lists, or ``marks``'
    resume: bool = True
    marks: dict[tuple[str, int], int] = field(default_factory=dict)
    port: int = 0
    received: list[Received] = field(default_factory=list)
    conns: list[WebSocketConnection] = field(default_factory=list)
    closes: list[tuple[int, str | None]] = field(default_factory=list)
    attempts: list[float] = field(default_factory=list)  # when each connection came in
    _changed: trio.Event = field(default_factory=trio.Event)

    @classmethod
    async def start(cls, nursery: trio.Nursery, **kwargs: Any) -> FakeServer:
        server = cls(**kwargs)
        ws_server = await nursery.start(
            partial(serve_websocket, server._handle, "127.0.0.1", 0, None)
        )
        server.port = ws_server.port
        return server

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _handle(self, request: WebSocketRequest) -> None:
        self.attempts.append(trio.current_time())
        self._notify()
        if request.path != "/v1/nodes/connect":
            await request.reject(404)
            return
        if self.reject_status is not None:
            await request.reject(self.reject_status, body=self.reject_body)
            return
        ws = await request.accept()
        index = len(self.conns)
        self.conns.append(ws)
        try:
            hello = decode_agent(await ws.get_message())
            assert isinstance(hello, Hello)
            self._record(index, hello)
            if self.refuse is not None:
                await ws.aclose(*self.refuse)
                return
            if self.bad_welcomes:
                await ws.send_message(self.bad_welcomes.pop(0))
                await ws.get_message()  # until the agent hangs up
            enrolling = hello.credential is None
            await ws.send_message(
                encode(
                    Welcome(
                        node_id=self.node_id,
                        credential=self.credential if enrolling else None,
                        heartbeat_sec=self.heartbeat_sec,
                    )
                )
            )
            if self.resume:
                held = [(r.job_id, r.attempt) for r in hello.running]
                marks = [ReportMark(job_id=j, attempt=a, n=self.mark(j, a)) for j, a in held]
                await ws.send_message(encode(Resume(marks=marks)))
            while True:
                msg = decode_agent(await ws.get_message())
                self._record(index, msg)
                if msg.type in self.unknown_types:
                    await ws.aclose(4400, "bad message: 1 validation error for tagged-union")
                    return
                if isinstance(msg, JobFinished) and self.auto_ack:
                    await ws.send_message(
                        encode(FinishedAck(job_id=msg.job_id, attempt=msg.attempt))
                    )
        except ConnectionClosed as exc:
            if exc.reason is not None:
                self.closes.append((exc.reason.code, exc.reason.reason))
            self._notify()

    def mark(self, job_id: str, attempt: int) -> int:
        """The last numbered report of the attempt this server has (``marks`` overrides)."""
        if (job_id, attempt) in self.marks:
            return self.marks[(job_id, attempt)]
        numbered = [
            m.n
            for r in self.received
            if isinstance(m := r.msg, JobLogs | JobMetric)
            and (m.job_id, m.attempt) == (job_id, attempt)
            and m.n is not None
        ]
        return max(numbered, default=0)

    def _record(self, conn: int, msg: Any) -> None:
        self.received.append(Received(conn, trio.current_time(), msg))
        self._notify()

    # -- test side

    async def send(self, msg: Any) -> None:
        await self.conns[-1].send_message(encode(msg))

    async def drop(self, code: int = 1011, reason: str = "test drops the connection") -> None:
        await self.conns[-1].aclose(code, reason)

    def of(self, kind: type[M], conn: int | None = None) -> list[M]:
        return [
            r.msg
            for r in self.received
            if isinstance(r.msg, kind) and (conn is None or r.conn == conn)
        ]

    def hellos(self) -> list[Hello]:
        return self.of(Hello)

    async def until(self, check: Callable[[], bool], within: float = WAIT_SEC) -> None:
        with trio.fail_after(within):
            while not check():
                await self._changed.wait()

    async def wait(
        self,
        kind: type[M],
        where: Callable[[M], bool] = lambda m: True,
        *,
        conn: int | None = None,
        within: float = WAIT_SEC,
    ) -> M:
        found: list[M] = []

        def check() -> bool:
            found[:] = [m for m in self.of(kind, conn) if where(m)]
            return bool(found)

        await self.until(check, within)
        return found[0]

    def stdout(self, job_id: str = "job_1") -> list[str]:
        return [
            text
            for m in self.of(JobLogs)
            if m.job_id == job_id
            for stream, text in m.lines
            if stream == "stdout"
        ]


def make_agent(tmp_path: Path, server: FakeServer, **kwargs: Any) -> Agent:
    options: dict[str, Any] = {
        "facts": FACTS,
        "grace_sec": 1.0,
        "backoff_min": 0.05,
        "backoff_max": 0.2,
        "work_dir": reachable_work_dir(),  # as root, jobs run as the job user
    }
    options.update(kwargs)
    return Agent(server.url, tmp_path / "agent", **options)


async def agent_until(agent: Agent, check: Callable[[], bool], within: float = WAIT_SEC) -> None:
    """Poll ``check`` (agent state has no event to wait on from outside)."""
    with trio.fail_after(within):
        while True:
            if check():
                return
            await trio.sleep(0.01)


def run_msg(command: list[str], job_id: str = "job_1", attempt: int = 1, **spec: Any) -> Run:
    return Run(job_id=job_id, attempt=attempt, spec=RunSpec(command=command, **spec))


def proc_exists(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def alive(pid: int) -> bool:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return data[data.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


# --------------------------------------------------------------------------- small parts


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://127.0.0.1:8080", "ws://127.0.0.1:8080/v1/nodes/connect"),
        ("http://127.0.0.1:8080/", "ws://127.0.0.1:8080/v1/nodes/connect"),
        ("https://runplane.example", "wss://runplane.example/v1/nodes/connect"),
        ("https://example.org/rp/", "wss://example.org/rp/v1/nodes/connect"),
        ("HTTP://h:1?x=1", "ws://h:1/v1/nodes/connect"),
        ("ws://h:1/v1/nodes/connect", "ws://h:1/v1/nodes/connect"),
        ("wss://h/v1/nodes/connect", "wss://h/v1/nodes/connect"),
    ],
)
def test_connect_url(given: str, expected: str) -> None:
    assert connect_url(given) == expected


@pytest.mark.parametrize("bad", ["127.0.0.1:8080", "ftp://h", "http://", ""])
def test_connect_url_refuses_non_http_urls(bad: str) -> None:
    with pytest.raises(ValueError, match="server URL must look like"):
        connect_url(bad)


def test_a_server_list_is_checked_whole_at_start(tmp_path: Path) -> None:
    agent = Agent(" http://a:1, https://b ,", tmp_path / "agent", facts=FACTS)
    assert agent.servers == ["http://a:1", "https://b"]
    assert (agent.server_url, agent.url) == ("http://a:1", "ws://a:1/v1/nodes/connect")
    with pytest.raises(ValueError, match="server URL must look like"):
        Agent("http://a:1,ftp://b", tmp_path / "agent", facts=FACTS)  # not at its turn


async def test_the_agent_moves_on_to_the_next_server_when_one_does_not_answer(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """``--server URL,URL``: an HA deploy's replicas; the first here is down."""
    server = await FakeServer.start(nursery)
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}"
    agent = make_agent(tmp_path, server)
    agent.session.servers = [dead, server.url]
    assert await nursery.start(agent.run) == "node_test"
    assert agent.server_url == server.url
    agent.request_stop()


# --------------------------------------------------------------------------- enrollment


async def test_enroll_saves_credential_then_reconnects_with_it(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server, join_token="rpj_join")
    assert await nursery.start(agent.run) == "node_test"
    assert agent.node_id == "node_test"

    first = server.hellos()[0]
    assert first.join_token == "rpj_join"
    assert first.credential is None
    assert first.protocol == PROTOCOL_VERSION
    assert first.agent_version == __version__
    # the given facts, with what this node enforces of jobs' limits (docs/executor.md)
    # and how it keeps jobs apart (uid-per-job as root: docs/executor.md, Isolation)
    own = [*agent.runner.rules.capabilities(), *agent.uid_capabilities()]
    assert first.facts == FACTS.model_copy(update={"capabilities": [*FACTS.capabilities, *own]})
    assert ("uid-per-job" in first.facts.capabilities) is (os.geteuid() == 0)
    assert first.channel == "stable"
    assert first.running == []

    cred = agent.data_dir / "credential"
    assert cred.read_text().strip() == "rpn_test_credential"
    assert stat.S_IMODE(cred.stat().st_mode) == 0o600
    assert (agent.data_dir / "node_id").read_text().strip() == "node_test"

    await server.drop()
    await server.until(lambda: len(server.hellos()) == 2)
    second = server.hellos()[1]
    assert second.credential == "rpn_test_credential"
    assert second.join_token is None
    await agent_until(agent, lambda: agent.statistics().welcomes == 2)


async def test_a_restarted_agent_presents_its_credential_not_the_join_token(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    first = make_agent(tmp_path, server, join_token="rpj_join")
    async with trio.open_nursery() as inner:
        await inner.start(first.run)
        first.request_stop()
    again = make_agent(tmp_path, server, join_token="rpj_join")
    assert again.node_id == "node_test"  # known from the data dir before connecting
    await nursery.start(again.run)
    hello = server.hellos()[-1]
    assert hello.credential == "rpn_test_credential"
    assert hello.join_token is None
    assert server.closes[0] == (1000, "agent stopping")


async def test_open_enrollment_without_a_join_token(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server)
    await nursery.start(agent.run)
    hello = server.hellos()[0]
    assert hello.join_token is None and hello.credential is None
    assert (agent.data_dir / "credential").exists()


async def test_second_agent_on_the_same_data_dir_is_refused(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    await nursery.start(make_agent(tmp_path, server).run)
    with pytest.raises(DataDirBusy, match="another agent is running with data dir"):
        await make_agent(tmp_path, server).run()


async def test_an_unusable_data_dir_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "agent").write_text("a file, not a directory")
    agent = Agent("http://127.0.0.1:9", tmp_path / "agent", facts=FACTS)
    with pytest.raises(AgentError, match=r"^cannot use data dir .*agent: "):
        await agent.run()


# --------------------------------------------------------------------------- timing


async def test_heartbeats_every_interval_with_the_running_jobs(
    nursery: trio.Nursery, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    server = await FakeServer.start(nursery, heartbeat_sec=5.0)
    agent = make_agent(tmp_path, server)
    await nursery.start(agent.run)
    welcomed_at = trio.current_time()
    await trio.sleep(21)
    beats = [r for r in server.received if isinstance(r.msg, Heartbeat)]
    assert [round(r.at - welcomed_at, 3) for r in beats] == [5.0, 10.0, 15.0, 20.0]
    assert all(r.msg.running == [] for r in beats)
    assert agent.statistics().connected


async def test_reconnects_with_exponential_backoff_reset_after_welcome(
    nursery: trio.Nursery, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    server = await FakeServer.start(nursery, reject_status=503)
    agent = make_agent(tmp_path, server, backoff_min=0.5, backoff_max=30.0, rng=random.Random(3))
    nursery.start_soon(agent.run)
    await server.until(lambda: len(server.attempts) == 9, within=600)
    gaps = [b - a for a, b in zip(server.attempts, server.attempts[1:], strict=False)]
    for n, gap in enumerate(gaps):
        ceiling = min(30.0, 0.5 * 2**n)
        assert ceiling / 2 - 1e-6 <= gap <= ceiling + 1e-6, (n, gaps)
    assert gaps[-1] >= 15  # 0.5, 1, 2, 4, 8, 16, 30, 30: capped
    assert agent.statistics().last_error == "rejected with HTTP 503"

    server.reject_status = None
    await server.until(lambda: len(server.hellos()) == 1, within=120)
    dropped_at = trio.current_time()
    await server.drop()
    await server.until(lambda: len(server.hellos()) == 2, within=120)
    assert server.attempts[-1] - dropped_at <= 0.5 + 1e-6  # backoff started over


async def test_unanswered_ping_gives_up_the_connection(
    nursery: trio.Nursery, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    server = await FakeServer.start(nursery, heartbeat_sec=5.0)
    agent = make_agent(tmp_path, server)
    await nursery.start(agent.run)
    # Stop the server's reader: pings go unanswered (a half-open connection looks like this).
    stream_lock = server.conns[0]._stream_lock
    await stream_lock.acquire()
    await agent_until(agent, lambda: agent.statistics().welcomes == 2, within=120)
    assert agent.statistics().last_error == "timed out"
    stream_lock.release()


# --------------------------------------------------------------------------- jobs


async def test_run_echo_reports_phases_logs_and_finish(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server)
    await nursery.start(agent.run)
    await server.send(run_msg(["echo", "hi"]))
    fin = await server.wait(JobFinished)
    assert (fin.job_id, fin.attempt, fin.outcome, fin.exit_code, fin.error) == (
        "job_1",
        1,
        "succeeded",
        0,
        None,
    )
    kinds = [
        (r.msg.type, getattr(r.msg, "phase", None))
        for r in server.received
        if isinstance(r.msg, JobPhase | JobLogs | JobFinished)
    ]
    assert kinds[:2] == [("job_phase", "pulling"), ("job_phase", "running")]
    assert kinds[-1] == ("job_finished", None)
    assert server.stdout() == ["hi"]
    assert (agent.work_root / "job_1" / "1").is_dir()
    await agent_until(agent, lambda: agent.statistics().unacked_finished == ())
    assert agent.statistics().running == ()
    assert list((agent.data_dir / "outbox").iterdir()) == []


async def test_metric_lines_become_job_metric(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await FakeServer.start(nursery)
    await nursery.start(make_agent(tmp_path, server).run)
    script = (
        """echo '::metric {"step": 1, "loss": 0.5}'; echo plain; """
        """echo '::metric {"loss": 0.25, "acc": 0.9}'"""
    )
    await server.send(run_msg(["sh", "-c", script]))
    fin = await server.wait(JobFinished)
    metrics = server.of(JobMetric)
    assert [(m.step, m.values) for m in metrics] == [
        (1, {"loss": 0.5}),
        (None, {"loss": 0.25, "acc": 0.9}),
    ]
    assert fin.final_metrics == {"loss": 0.25, "acc": 0.9}
    assert server.stdout() == ["plain"]


async def test_env_setup_and_inline_files_reach_the_job(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    await nursery.start(make_agent(tmp_path, server).run)
    await server.send(
        run_msg(
            ["sh", "-c", 'cat note.txt; echo "$GREETING $RUNPLANE_JOB_ID"; cat from-setup'],
            env={"GREETING": "hello"},
            setup="echo prepared > from-setup",
            inline_files={"note.txt": "inline\n"},
        )
    )
    fin = await server.wait(JobFinished)
    assert fin.outcome == "succeeded"
    assert server.stdout() == ["inline", "hello job_1", "prepared"]
    assert [m.phase for m in server.of(JobPhase)] == ["pulling", "running"]


async def test_cancel_kills_the_job_and_reports_cancelled(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server)
    await nursery.start(agent.run)
    await server.send(run_msg(["sh", "-c", "echo $$; exec sleep 600"]))
    await server.until(lambda: bool(server.stdout()))
    pid = int(server.stdout()[0])
    assert alive(pid)
    assert agent.job_pids() == {pid}
    await server.send(Cancel(job_id="job_1", attempt=1))
    fin = await server.wait(JobFinished)
    assert fin.outcome == "cancelled"
    assert fin.error == "cancelled"
    assert not alive(pid)
    assert not proc_exists(pid)  # reaped, not a zombie
    await server.send(Cancel(job_id="job_1", attempt=1))  # late cancel: ignored
    await server.send(run_msg(["true"], job_id="job_2"))
    assert (await server.wait(JobFinished, lambda m: m.job_id == "job_2")).outcome == "succeeded"


async def test_run_is_idempotent_while_running_and_until_acked(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery, auto_ack=False)
    agent = make_agent(tmp_path, server)
    await nursery.start(agent.run)
    await server.send(run_msg(["sh", "-c", "echo up; sleep 600"]))
    await server.until(lambda: server.stdout() == ["up"])
    await server.send(run_msg(["sh", "-c", "echo up; sleep 600"]))
    await server.send(Cancel(job_id="job_1", attempt=1))
    await server.wait(JobFinished)
    await server.send(run_msg(["echo", "again"]))  # finished, not acked yet: still ignored
    await server.send(run_msg(["echo", "attempt 2"], attempt=2))  # a new attempt runs
    await server.wait(JobFinished, lambda m: m.attempt == 2)
    pulling = [(m.job_id, m.attempt) for m in server.of(JobPhase) if m.phase == "pulling"]
    assert pulling == [("job_1", 1), ("job_1", 2)]
    assert "again" not in server.stdout()


async def test_a_bad_job_id_fails_the_job_without_running_it(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server)
    await nursery.start(agent.run)
    await server.send(run_msg(["touch", "/tmp/should-not-run"], job_id="../escape"))
    fin = await server.wait(JobFinished)
    assert fin.outcome == "failed"
    assert fin.error is not None and fin.error.startswith("invalid job id")
    assert server.of(JobPhase) == []
    assert not (agent.data_dir.parent / "escape").exists()


async def test_more_runs_than_max_concurrency_still_run(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server, max_concurrency=1)
    await nursery.start(agent.run)
    assert server.hellos()[0].facts.max_concurrency == 1
    for n in (1, 2):
        await server.send(run_msg(["sh", "-c", "sleep 0.3; echo done"], job_id=f"job_{n}"))
    await server.until(lambda: len(server.of(JobFinished)) == 2)
    assert {m.outcome for m in server.of(JobFinished)} == {"succeeded"}


# --------------------------------------------------------------------------- disconnects


WAIT_FOR_GO = "echo started; while [ ! -e go ]; do sleep 0.02; done; echo after"


async def test_jobs_survive_a_disconnect_and_finishes_are_resent_until_acked(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery, auto_ack=False, heartbeat_sec=0.2)
    agent = make_agent(tmp_path, server)
    await nursery.start(agent.run)
    await server.send(run_msg(["sh", "-c", WAIT_FOR_GO]))
    await server.until(lambda: server.stdout() == ["started"])
    held = [RunningJob(job_id="job_1", attempt=1)]

    # Dropped while the job runs: the agent comes back and says it still runs the job.
    await server.drop()
    await server.until(lambda: len(server.hellos()) == 2)
    assert server.hellos()[1].running == held
    await server.wait(Heartbeat, lambda m: m.running == held, conn=1, within=10)

    # Dropped and kept out: the job finishes while the agent is disconnected.
    server.reject_status = 503
    await server.drop()
    await agent_until(agent, lambda: not agent.statistics().connected)
    (agent.work_root / "job_1" / "1" / "go").touch()
    await agent_until(agent, lambda: agent.statistics().unacked_finished == (("job_1", 1),))
    assert agent.statistics().running == ()
    assert server.of(JobFinished) == []

    # Back: hello still lists the attempt, then its logs and finish are delivered in order.
    server.reject_status = None
    fin = await server.wait(JobFinished, conn=2)
    assert server.hellos()[2].running == held
    assert fin.outcome == "succeeded"
    assert server.stdout() == ["started", "after"]
    conn2 = [r.msg for r in server.received if r.conn == 2]
    assert conn2[-1] == fin
    assert any(isinstance(m, JobLogs) and ("stdout", "after") in m.lines for m in conn2)

    # Not acked: resent on the next connection; acked there: gone for good.
    server.auto_ack = True
    await server.drop()
    assert await server.wait(JobFinished, conn=3) == fin
    assert server.hellos()[3].running == held
    await agent_until(agent, lambda: agent.statistics().unacked_finished == ())
    await server.drop()
    await server.until(lambda: len(server.hellos()) == 5)
    assert server.hellos()[4].running == []
    await trio.sleep(0.2)
    assert server.of(JobFinished, conn=4) == []


async def test_reports_a_crashed_server_did_not_store_are_resent_once_in_order(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery, heartbeat_sec=0.2)
    agent = make_agent(tmp_path, server)
    await nursery.start(agent.run)
    await server.send(run_msg(["sh", "-c", WAIT_FOR_GO]))
    started = await server.wait(JobLogs, lambda m: ("stdout", "started") in m.lines)
    assert started.n is not None  # numbered: this server said resume

    # The server "crashed" before storing it: its next session says it has nothing.
    server.marks[("job_1", 1)] = started.n - 1
    await server.drop()
    again = await server.wait(JobLogs, lambda m: ("stdout", "started") in m.lines, conn=1)
    assert again == started  # the same report, the same number

    # A server that stored everything gets nothing again; numbers go on rising.
    server.marks.clear()
    await server.drop()
    await server.until(lambda: len(server.hellos()) == 3)
    (agent.work_root / "job_1" / "1" / "go").touch()
    await server.wait(JobFinished, conn=2)
    after = [r.msg for r in server.received if r.conn == 2 and isinstance(r.msg, JobLogs)]
    assert [line for m in after for line in m.lines if line[0] == "stdout"] == [("stdout", "after")]
    assert all(m.n is not None and m.n > started.n for m in after)
    assert server.stdout() == ["started", "started", "after"]  # twice on the wire only


async def test_a_server_from_before_resume_gets_reports_unnumbered(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery, resume=False)
    agent = make_agent(tmp_path, server)
    await nursery.start(agent.run)
    await server.send(run_msg(["echo", "hi"]))
    await server.wait(JobFinished)
    assert server.stdout() == ["hi"]
    assert all(m.n is None for m in server.of(JobLogs) + server.of(JobMetric))


async def test_output_while_disconnected_is_bounded(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox, "MAX_BUFFERED_UNITS", 1000)
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server)
    await nursery.start(agent.run)
    await server.send(
        run_msg(["sh", "-c", WAIT_FOR_GO.replace("echo after", "seq 1 5000; echo end")])
    )
    await server.until(lambda: server.stdout() == ["started"])
    server.reject_status = 503
    await server.drop()
    await agent_until(agent, lambda: not agent.statistics().connected)
    (agent.work_root / "job_1" / "1" / "go").touch()
    await agent_until(agent, lambda: agent.statistics().unacked_finished != ())
    server.reject_status = None
    fin = await server.wait(JobFinished, conn=1)
    assert fin.outcome == "succeeded"
    lines = [line for m in server.of(JobLogs, conn=1) for line in m.lines]
    assert lines[0][0] == "system"
    assert lines[0][1].startswith("agent dropped 4") and "log lines" in lines[0][1]
    assert len(lines) == 1001  # the note + the newest 1000 (stdout and system lines)
    out = [t for s, t in lines if s == "stdout"]
    assert out[-2:] == ["5000", "end"]
    assert out == [str(n) for n in range(5001 - len(out) + 1, 5001)] + ["end"]
    assert agent.statistics().dropped_lines == 5002 - 1000  # seq, "end", the exit code line


async def test_finish_kept_on_disk_is_resent_by_the_next_agent(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session, "STOP_FLUSH_SEC", 0.2)
    server = await FakeServer.start(nursery, auto_ack=False)
    first = make_agent(tmp_path, server)
    async with trio.open_nursery() as inner:
        await inner.start(first.run)
        await server.send(run_msg(["echo", "done"]))
        fin = await server.wait(JobFinished)
        first.request_stop()
    assert len(list((first.data_dir / "outbox").iterdir())) == 1

    server.auto_ack = True
    again = make_agent(tmp_path, server)
    await nursery.start(again.run)
    assert server.hellos()[1].running == [RunningJob(job_id="job_1", attempt=1)]
    assert await server.wait(JobFinished, conn=1) == fin
    await agent_until(again, lambda: again.statistics().unacked_finished == ())
    assert list((again.data_dir / "outbox").iterdir()) == []


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("code", "reason", "message"),
    [
        (4401, REVOKED, REVOKED),
        (4426, "agent protocol 1 unsupported: upgrade runplane to 0.2", "agent protocol 1"),
        (4403, "", "the server does not accept node agents"),
    ],
)
async def test_fatal_close_codes_raise_agent_refused(
    nursery: trio.Nursery, tmp_path: Path, code: int, reason: str, message: str
) -> None:
    server = await FakeServer.start(nursery, refuse=(code, reason))
    agent = make_agent(tmp_path, server, join_token="rpj_revoked")
    with trio.fail_after(WAIT_SEC), pytest.raises(AgentRefused) as info:
        await agent.run()
    assert info.value.code == code
    assert str(info.value).startswith(message)
    assert len(server.hellos()) == 1  # not retried


async def test_refused_credential_says_where_it_is(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server)
    async with trio.open_nursery() as inner:
        await inner.start(agent.run)
        agent.request_stop()
    server.refuse = (4401, "node credential revoked")
    with trio.fail_after(WAIT_SEC), pytest.raises(AgentRefused) as info:
        await make_agent(tmp_path, server).run()
    assert str(info.value).startswith("node credential revoked (node credential from ")
    assert "--join-token" in str(info.value)


async def test_http_401_on_upgrade_is_fatal_too(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await FakeServer.start(
        nursery, reject_status=401, reject_body=b'{"detail": "bad join token"}'
    )
    with trio.fail_after(WAIT_SEC), pytest.raises(AgentRefused) as info:
        await make_agent(tmp_path, server).run()
    assert str(info.value) == "server refused the connection (HTTP 401): bad join token"


async def test_replaced_connection_stops_the_agent(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server)

    async def replace() -> None:
        await server.until(lambda: len(server.hellos()) == 1)
        await server.drop(4409, "replaced by a newer connection of node_test")

    async with trio.open_nursery() as inner:
        inner.start_soon(replace)
        with trio.fail_after(WAIT_SEC), pytest.raises(AgentReplaced, match="replaced by a newer"):
            await agent.run()
    assert len(server.hellos()) == 1


async def test_a_bad_welcome_is_retried(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await FakeServer.start(nursery, bad_welcomes=['{"type": "run"}'])
    agent = make_agent(tmp_path, server)
    await nursery.start(agent.run)
    assert len(server.hellos()) == 2
    assert agent.statistics().connect_attempts == 2
    assert "bad first message" in (agent.statistics().last_error or "")


# --------------------------------------------------------------------------- stopping


async def test_cancelling_run_cancels_jobs_and_reports_them(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server)
    with trio.fail_after(WAIT_SEC):
        async with trio.open_nursery() as inner:
            await inner.start(agent.run)
            await server.send(run_msg(["sh", "-c", "echo $$; exec sleep 600"]))
            await server.until(lambda: bool(server.stdout()))
            inner.cancel_scope.cancel()
    pid = int(server.stdout()[0])
    assert not alive(pid)
    fin = server.of(JobFinished)[0]
    assert fin.outcome == "cancelled"
    await server.until(lambda: bool(server.closes))
    assert server.closes == [(1000, "agent stopping")]


async def test_stop_timeout_kills_what_does_not_stop(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server, grace_sec=30.0, stop_timeout=0.5)
    with trio.fail_after(10):
        async with trio.open_nursery() as inner:
            await inner.start(agent.run)
            await server.send(run_msg(["sh", "-c", "trap '' TERM; echo $$; sleep 600 & wait"]))
            await server.until(lambda: bool(server.stdout()))
            inner.cancel_scope.cancel()
    assert not alive(int(server.stdout()[0]))


async def test_stop_now_kills_jobs_without_waiting(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server, grace_sec=30.0)
    with trio.fail_after(5):
        async with trio.open_nursery() as inner:
            await inner.start(agent.run)
            await server.send(run_msg(["sh", "-c", "trap '' TERM; echo $$; sleep 600 & wait"]))
            await server.until(lambda: bool(server.stdout()))
            agent.request_stop()  # graceful: would wait 30 s for the job to give up
            await trio.sleep(0.2)
            agent.stop_now()
    assert not alive(int(server.stdout()[0]))
    assert server.of(JobFinished) == []


async def test_request_stop_while_disconnected_returns(
    nursery: trio.Nursery, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    server = await FakeServer.start(nursery, reject_status=503)
    agent = make_agent(tmp_path, server, backoff_min=10.0, backoff_max=60.0)
    async with trio.open_nursery() as inner:
        inner.start_soon(agent.run)
        await server.until(lambda: len(server.attempts) == 1)
        await trio.sleep(1)  # in the backoff sleep (5-10 s) now
        stop_at = trio.current_time()
        agent.request_stop()
    assert trio.current_time() - stop_at < 0.1  # the backoff sleep was cut short
    assert len(server.attempts) == 1
