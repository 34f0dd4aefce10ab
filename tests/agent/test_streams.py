"""Realtime streams and teleop on the agent (``runplane/agent/streams.py``, docs/streams.md):
the watcher with real processes writing real files (inotify and the polling fallback), the
teleop file, the outbox's handling of stream chunks and acks, the sandbox's ``/streams``,
a real agent against the in-test server (``FakeServer`` of test_client.py), and the
sim-cartpole stack's realtime mode."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
import tomllib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from runplane.agent import streams
from runplane.agent.executor import ExecSpec, LogLines, job_environment, run_job
from runplane.agent.isolation import JobUser
from runplane.agent.launch import SANDBOX_STREAMS_DIR, Launch
from runplane.agent.limits import bwrap_works
from runplane.agent.outbox import Outbox
from runplane.agent.protocol import (
    JobFinished,
    JobLogs,
    JobPhase,
    JobStream,
    StreamChunkIn,
    Teleop,
    TeleopAck,
)
from runplane.agent.stream_files import MAX_CHUNK_BYTES, MAX_STREAMS
from runplane.agent.streams import (
    MAX_MESSAGE_CHUNKS,
    append_teleop,
    chunk_of,
    forward_streams,
    make_streams_dir,
    messages_of,
    teleop_line,
)
from tests.agent.test_client import FakeServer, agent_until, make_agent, run_msg

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
WAIT_SEC = 20.0
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="chown to another user needs root")
WATCHERS = [pytest.param(True, id="inotify"), pytest.param(False, id="polling")]


# --------------------------------------------------------------------------- the harness


@dataclass
class Collected:
    """What a watcher emitted: ``job_stream`` messages and notes, in order."""

    messages: list[JobStream] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _changed: trio.Event = field(default_factory=trio.Event)

    async def emit(self, msg: JobStream) -> None:
        self.messages.append(msg)
        self._wake()

    async def note(self, text: str) -> None:
        self.notes.append(text)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def chunks(self, stream: str = "telemetry") -> list[StreamChunkIn]:
        return [c for m in self.messages if m.stream == stream for c in m.chunks]

    def data(self, stream: str = "telemetry") -> list[str]:
        return [c.data for c in self.chunks(stream)]

    async def until(self, check: Callable[[], bool], within: float = WAIT_SEC) -> None:
        with trio.fail_after(within):
            while not check():
                await self._changed.wait()


@asynccontextmanager
async def watching(
    directory: Path, inotify: bool = True, owner: int | None = None
) -> AsyncIterator[Collected]:
    """A watcher on ``directory`` for the body; stopped (last lines flushed) after it."""
    got = Collected()
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(
                forward_streams,
                directory,
                got.emit,
                job_id="job_1",
                attempt=1,
                stop=stop,
                note=got.note,
                owner=owner,
                inotify=inotify,
            )
        )
        try:
            yield got
        finally:
            stop.set()


def streams_dir(tmp_path: Path) -> Path:
    workdir = tmp_path / "jobs" / "job_1" / "1"
    workdir.mkdir(parents=True)
    return make_streams_dir(workdir)


async def write_with(code: str, *args: str) -> None:
    """Run a real process (python) that writes stream files."""
    await trio.run_process([PYTHON, "-c", textwrap.dedent(code), *args])


def teleop(seq: int, frame: str, stream: str = "control", **kw: Any) -> Teleop:
    fields: dict[str, Any] = {"job_id": "job_1", "attempt": 1, "ts": 1767225600000 + seq}
    fields.update(kw)
    return Teleop(stream=stream, seq=seq, frame=frame, **fields)


# --------------------------------------------------------------------------- the watcher


@pytest.mark.parametrize("inotify", WATCHERS)
async def test_lines_of_a_real_process_arrive_in_order_with_their_encodings(
    tmp_path: Path, inotify: bool
) -> None:
    directory = streams_dir(tmp_path)
    before = int(time.time() * 1000)
    async with watching(directory, inotify) as got:
        await write_with(
            r"""
            import os, sys
            with open(os.path.join(sys.argv[1], "telemetry"), "ab", buffering=0) as out:
                out.write(b'{"x": 1.5, "theta": -0.25}\n')
                out.write(b"plain text\r\n")
                out.write(b'{"encoding": "base64", "data": "aGVsbG8="}\n')
                out.write(b'{"encoding": "base64", "data": "aGk=", "more": 1}\n')
                out.write(b'{"encoding": "base64", "data": 5}\n')
                out.write(b"NaN\n[1, 2]\n\"a string\"\n")
                out.write(b"bad \xff bytes\n\n")
                out.write(b'{"a": \n')
            """,
            str(directory),
        )
        await got.until(lambda: len(got.chunks()) == 11)
    after = int(time.time() * 1000)
    assert [(c.encoding, c.data) for c in got.chunks()] == [
        ("json", '{"x": 1.5, "theta": -0.25}'),
        ("text", "plain text"),
        ("base64", "aGVsbG8="),
        ("json", '{"encoding": "base64", "data": "aGk=", "more": 1}'),
        ("json", '{"encoding": "base64", "data": 5}'),
        ("text", "NaN"),
        ("json", "[1, 2]"),
        ("json", '"a string"'),
        ("text", "bad \ufffd bytes"),
        ("text", ""),
        ("text", '{"a": '),
    ]
    assert all(before <= c.ts <= after for c in got.chunks())
    assert {(m.job_id, m.attempt, m.stream) for m in got.messages} == {("job_1", 1, "telemetry")}
    assert got.notes == []


@pytest.mark.parametrize("inotify", WATCHERS)
async def test_a_partial_line_waits_for_its_newline_and_the_last_one_is_sent_at_the_end(
    tmp_path: Path, inotify: bool
) -> None:
    directory = streams_dir(tmp_path)
    path = directory / "telemetry"
    async with watching(directory, inotify) as got:
        with path.open("ab", buffering=0) as out:
            out.write(b"one\ntw")
            await got.until(lambda: got.data() == ["one"])
            await trio.sleep(0.3)
            assert got.data() == ["one"]  # "tw" waits for its newline
            out.write(b"o\nthree")
            await got.until(lambda: got.data() == ["one", "two"])
            await trio.sleep(0.1)
            assert got.data() == ["one", "two"]
    assert got.data() == ["one", "two", "three"]  # at the end, without its newline


@pytest.mark.parametrize("inotify", WATCHERS)
async def test_a_line_over_256_kib_is_not_sent_and_the_log_says_so(
    tmp_path: Path, inotify: bool
) -> None:
    directory = streams_dir(tmp_path)
    async with watching(directory, inotify) as got:
        await write_with(
            r"""
            import os, sys, time
            with open(os.path.join(sys.argv[1], "big"), "ab", buffering=0) as out:
                out.write(b"a" * 262144 + b"\r\n")         # the most a chunk may be
                out.write(b"b" * 262145 + b"\n")           # one byte too many
                for _ in range(5):                          # 300000 bytes in pieces
                    out.write(b"c" * 60000)
                    time.sleep(0.02)
                out.write(b"\nafter\n")
                out.write(b"d" * 300000)                    # the end, no newline
            """,
            str(directory),
        )
        await got.until(lambda: got.data("big")[-1:] == ["after"] and len(got.notes) == 2)
    assert [len(d) for d in got.data("big")] == [262144, 5]
    assert got.data("big")[0] == "a" * MAX_CHUNK_BYTES
    assert got.notes == [
        f"stream big: dropped a line of {n} bytes (a stream chunk is at most 262144 bytes; "
        "write bigger payloads to a file)"
        for n in (262145, 300000, 300000)
    ]


async def test_every_stream_file_is_followed_and_nothing_else(tmp_path: Path) -> None:
    directory = streams_dir(tmp_path)
    (directory / "early").write_text("before the watcher\n")
    os.mkfifo(directory / "fifo")
    (directory / "sub").mkdir()
    (directory / "link").symlink_to(directory / "early")
    async with watching(directory) as got:
        await got.until(lambda: got.data("early") == ["before the watcher"])
        await write_with(
            r"""
            import os, sys
            d = sys.argv[1]
            names = ["telemetry", "video-1", "x.txt", "control.teleop", ".hidden", "a.b"]
            files = {n: open(os.path.join(d, n), "a", buffering=1) for n in names}
            for i in range(50):
                for name, f in files.items():
                    f.write(f'{{"{name}": {i}}}\n')
            """,
            str(directory),
        )
        await got.until(lambda: len(got.data("telemetry")) == len(got.data("video-1")) == 50)
    assert {m.stream for m in got.messages} == {"early", "telemetry", "video-1"}
    assert got.data("telemetry") == [f'{{"telemetry": {i}}}' for i in range(50)]
    assert got.data("video-1") == [f'{{"video-1": {i}}}' for i in range(50)]
    assert sorted(got.notes) == [
        "stream fifo: not followed (not a regular file of the job)",
        "stream link: not followed (not a regular file of the job)",
        "stream sub: not followed (not a regular file of the job)",
    ]


async def test_a_job_publishes_at_most_64_streams(tmp_path: Path) -> None:
    directory = streams_dir(tmp_path)
    for n in range(MAX_STREAMS + 16):
        (directory / f"s{n:03d}").write_text(f"{n}\n")
    async with watching(directory) as got:
        await got.until(lambda: len(got.messages) == MAX_STREAMS and len(got.notes) == 11)
    assert sorted(m.stream for m in got.messages) == [f"s{n:03d}" for n in range(MAX_STREAMS)]
    assert got.notes[:10] == [
        f"stream s{n:03d}: not followed (a job publishes at most {MAX_STREAMS} streams)"
        for n in range(MAX_STREAMS, MAX_STREAMS + 10)
    ]
    assert got.notes[10] == "more stream files not followed: no more notes of them"


async def test_a_burst_goes_out_in_order_in_messages_of_at_most_512_chunks(
    tmp_path: Path,
) -> None:
    directory = streams_dir(tmp_path)
    (directory / "telemetry").write_text("".join(f"{i}\n" for i in range(2000)))
    async with watching(directory) as got:
        await got.until(lambda: len(got.chunks()) == 2000)
    assert got.data() == [str(i) for i in range(2000)]
    assert [len(m.chunks) for m in got.messages] == [MAX_MESSAGE_CHUNKS] * 3 + [464]
    assert all(c.encoding == "json" for c in got.chunks())
    big = StreamChunkIn(data="x" * 200_000, ts=1)  # 512 KiB of data a message at most
    assert [len(m.chunks) for m in messages_of("j", 1, "s", [big] * 5)] == [2, 2, 1]
    huge = StreamChunkIn(data="x" * 600_000, ts=1)  # (a stream's lines are smaller)
    assert [len(m.chunks) for m in messages_of("j", 1, "s", [huge, big])] == [1, 1]
    assert len(list(messages_of("j", 1, "s", [StreamChunkIn(data="z", ts=1)] * 512))) == 1


async def test_a_replaced_or_truncated_file_is_read_from_its_start(tmp_path: Path) -> None:
    directory = streams_dir(tmp_path)
    path = directory / "telemetry"
    async with watching(directory) as got:
        path.write_text("first 1\nfirst 2\n")
        await got.until(lambda: got.data() == ["first 1", "first 2"])
        (directory / "x.tmp").write_text("second 1\n")  # (not a stream name)
        os.rename(directory / "x.tmp", path)  # replaced by another file
        await got.until(lambda: got.data()[2:] == ["second 1"])
        path.write_text("third\n")  # truncated and rewritten
        await got.until(lambda: got.data()[3:] == ["third"])
    assert {m.stream for m in got.messages} == {"telemetry"}


@needs_root
async def test_only_files_of_the_job_user_are_followed(tmp_path: Path) -> None:
    directory = streams_dir(tmp_path)
    (directory / "theirs").write_text("not the job's\n")
    os.chown(directory / "theirs", 12345, 12345)
    (directory / "ours").write_text("the job's\n")
    async with watching(directory, owner=os.geteuid()) as got:
        await got.until(lambda: got.data("ours") == ["the job's"] and len(got.notes) == 1)
    assert got.data("theirs") == []
    assert got.notes == ["stream theirs: not followed (not a regular file of the job)"]


def test_chunk_encodings() -> None:
    assert chunk_of(b'{"encoding": "base64", "data": ""}', 7) == StreamChunkIn(
        data="", encoding="base64", ts=7
    )
    assert chunk_of(b' {"k": [1, {"z": null}]} ', 1).encoding == "json"
    assert chunk_of(b"Infinity", 1).encoding == "text"
    assert chunk_of(b"\xef\xbb\xbf{}", 1).encoding == "text"  # a BOM is not JSON
    assert chunk_of("\u00e9t\u00e9".encode(), 1) == StreamChunkIn(data="\u00e9t\u00e9", ts=1)


# --------------------------------------------------------------------------- the directory and teleop


def test_the_streams_dir_is_a_fresh_sibling_of_the_workdir(tmp_path: Path) -> None:
    workdir = tmp_path / "jobs" / "job_1" / "1"
    workdir.mkdir(parents=True)
    leftover = tmp_path / "jobs" / "job_1" / "1.streams"
    leftover.mkdir()
    (leftover / "telemetry").write_text("of an earlier run\n")
    made = make_streams_dir(workdir)
    assert made == leftover.absolute() and made.is_absolute()
    assert list(made.iterdir()) == []
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    if ROOT:
        user = JobUser("job", 12345, 12346)
        again = make_streams_dir(workdir, user)
        assert (again.stat().st_uid, again.stat().st_gid) == (12345, 12346)


def test_teleop_frames_are_appended_one_line_each_in_order(tmp_path: Path) -> None:
    directory = streams_dir(tmp_path)
    append_teleop(directory, teleop(1, '{"push":0.5}'))
    append_teleop(directory, teleop(2, '{"a": [1, 2], "b": "x y"}'))
    append_teleop(directory, teleop(3, '"plain"', ts=5))
    append_teleop(directory, teleop(1, "{}", stream="other"))
    path = directory / "control.teleop"
    assert path.read_bytes() == (
        b'{"seq": 1, "ts": 1767225600001, "frame": {"push":0.5}}\n'
        b'{"seq": 2, "ts": 1767225600002, "frame": {"a": [1, 2], "b": "x y"}}\n'
        b'{"seq": 3, "ts": 5, "frame": "plain"}\n'
    )
    assert [json.loads(line)["seq"] for line in path.read_text().splitlines()] == [1, 2, 3]
    assert (directory / "other.teleop").read_text() == (
        '{"seq": 1, "ts": 1767225600001, "frame": {}}\n'
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # a frame with line breaks (not compact) still makes one line
    assert teleop_line(teleop(4, '{\n  "x": 1\r\n}')) == (
        b'{"seq": 4, "ts": 1767225600004, "frame": {   "x": 1  }}\n'
    )


def test_teleop_follows_no_symlink_and_writes_only_the_jobs_own_file(tmp_path: Path) -> None:
    directory = streams_dir(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (directory / "control.teleop").symlink_to(victim)
    with pytest.raises(OSError):
        append_teleop(directory, teleop(1, "{}"))
    (directory / "control.teleop").unlink()
    os.link(victim, directory / "control.teleop")  # a second name of another file
    with pytest.raises(OSError, match="not a regular file of the job"):
        append_teleop(directory, teleop(1, "{}"))
    assert victim.read_text() == "precious\n"
    with pytest.raises(OSError):
        append_teleop(tmp_path / "missing", teleop(1, "{}"))


@needs_root
def test_teleop_files_belong_to_the_job_user(tmp_path: Path) -> None:
    user = JobUser("job", 12345, 12346)
    workdir = tmp_path / "w" / "1"
    workdir.mkdir(parents=True)
    directory = make_streams_dir(workdir, user)
    append_teleop(directory, teleop(1, "{}"), user=user)
    append_teleop(directory, teleop(2, "{}"), user=user)  # the user's file: appended
    st = (directory / "control.teleop").stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (12345, 12346, 0o600)
    assert len((directory / "control.teleop").read_text().splitlines()) == 2
    (directory / "other.teleop").write_text("")  # root's, not the job user's
    with pytest.raises(OSError, match="not a regular file of the job"):
        append_teleop(directory, teleop(1, "{}", stream="other"), user=user)


# --------------------------------------------------------------------------- the outbox


def stream_msg(*data: str, job: str = "j") -> JobStream:
    return JobStream(
        job_id=job,
        attempt=1,
        stream="telemetry",
        chunks=[StreamChunkIn(data=d, ts=1) for d in data],
    )


def drain(box: Outbox) -> list[Any]:
    out: list[Any] = []
    while (head := box.head()) is not None:
        out.extend(head[1])
        box.sent(0.0)
    return out


def test_the_outbox_drops_the_oldest_stream_chunks_like_log_lines() -> None:
    box = Outbox(max_units=100)
    box.put(JobPhase(job_id="j", attempt=1, phase="running"))
    for batch in range(10):
        box.put(stream_msg(*(f"c{batch * 20 + i}" for i in range(20))))
    box.put(JobLogs(job_id="j", attempt=1, lines=[("stdout", "a log line")]))
    assert box.units(("j", 1)) == 100
    sent = drain(box)
    assert sent[0].type == "job_phase"
    assert sent[1] == JobLogs(
        job_id="j",
        attempt=1,
        lines=[
            (
                "system",
                "agent dropped 101 stream chunks of this job: too much output buffered "
                "while disconnected from the server",
            )
        ],
    )
    chunks = [c.data for m in sent if isinstance(m, JobStream) for c in m.chunks]
    assert chunks == [f"c{i}" for i in range(101, 200)]  # the newest, in order
    assert sent[-1].lines == [("stdout", "a log line")]
    assert box.dropped_chunks == 101 and box.dropped_lines == 0


def test_the_outbox_bounds_stream_data_by_bytes_and_drops_logs_and_chunks_in_age_order() -> None:
    box = Outbox(max_bytes=1000)
    box.put(JobLogs(job_id="j", attempt=1, lines=[("stdout", "x" * 300)] * 2))
    box.put(stream_msg("y" * 300, "y" * 300))
    box.put(stream_msg("z" * 500))
    sent = drain(box)
    assert sent[0].lines[0][1] == (
        "agent dropped 2 log lines and 1 stream chunk of this job: too much output buffered "
        "while disconnected from the server"
    )
    assert [[c.data[0] for c in m.chunks] for m in sent[1:]] == [["y"], ["z"]]


def test_teleop_acks_go_first_and_are_forgotten_with_the_connection() -> None:
    box = Outbox()
    box.put(stream_msg("a"))
    ack = TeleopAck(job_id="j", attempt=1, stream="control", seq=1, ok=True)
    box.put_control(ack)
    assert box.pending() == 2
    assert box.head() == (("j", 1), [ack])
    box.sent(0.0)
    assert [m.type for m in drain(box)] == ["job_stream"]
    box.put_control(ack)
    assert box.clear_control() == 1 and box.empty()


# --------------------------------------------------------------------------- the sandbox


def test_the_sandbox_binds_the_streams_dir_at_its_path_and_at_slash_streams(
    tmp_path: Path,
) -> None:
    workdir, directory = tmp_path / "w", tmp_path / "w.streams"
    launch = Launch(bwrap="/usr/bin/bwrap", sandbox=True)
    argv = launch.argv(["/bin/true"], workdir, (), directory)
    pairs = [argv[i : i + 3] for i, a in enumerate(argv) if a == "--bind"]
    assert ["--bind", str(directory), str(directory)] in pairs
    assert ["--bind", str(directory), SANDBOX_STREAMS_DIR] in pairs
    assert argv.index("--remount-ro") > argv.index(SANDBOX_STREAMS_DIR)
    usr = argv.index("/usr")
    assert argv[usr - 1 : usr + 2] == ["--ro-bind", "/usr", "/usr"]
    assert SANDBOX_STREAMS_DIR not in launch.argv(["/bin/true"], workdir)
    spec = ExecSpec(job_id="j", command=["true"], env={}, workdir=workdir, streams_dir=directory)
    assert job_environment(spec)["RUNPLANE_STREAMS_DIR"] == str(directory)
    boxed = ExecSpec(
        job_id="j",
        command=["true"],
        env={"RUNPLANE_STREAMS_DIR": "/elsewhere"},
        workdir=workdir,
        streams_dir=directory,
        launch=launch,
    )
    assert job_environment(boxed)["RUNPLANE_STREAMS_DIR"] == "/streams"
    assert "RUNPLANE_STREAMS_DIR" not in job_environment(
        ExecSpec(job_id="j", command=["true"], env={}, workdir=workdir)
    )


@pytest.mark.skipif(bwrap_works() is None, reason="bubblewrap cannot create namespaces here")
async def test_a_sandboxed_job_writes_to_slash_streams_and_the_host_dir_gets_it(
    tmp_path: Path,
) -> None:
    workdir = tmp_path / "w"
    directory = make_streams_dir(workdir)
    launch = Launch(bwrap=bwrap_works(), sandbox=True)
    script = (
        'echo "{\\"dir\\": \\"$RUNPLANE_STREAMS_DIR\\"}" >> "$RUNPLANE_STREAMS_DIR/telemetry"; '
        "touch /streams-not-here 2>/dev/null || echo 'root is read-only'"
    )
    spec = ExecSpec(
        job_id="j",
        command=["sh", "-c", script],
        env={},
        workdir=workdir,
        streams_dir=directory,
        launch=launch,
    )
    lines: list[tuple[str, str]] = []

    async def report(event: object) -> None:
        if isinstance(event, LogLines):
            lines.extend(event.lines)

    finished = await run_job(spec, report)
    assert finished.outcome == "succeeded", lines
    assert (directory / "telemetry").read_text() == '{"dir": "/streams"}\n'
    assert ("stdout", "root is read-only") in lines
    assert not await trio.Path("/streams-not-here").exists()
    assert not await trio.Path("/streams").exists()  # (the host's / untouched)


# --------------------------------------------------------------------------- a real agent

#: The job: says where its streams are, then echoes each teleop line of "control" onto its
#: "telemetry" stream as it is; a frame {"stop": true} ends it.
ECHO = textwrap.dedent(
    r"""
    import json, os, sys, time
    d = os.environ["RUNPLANE_STREAMS_DIR"]
    out = open(os.path.join(d, "telemetry"), "a", buffering=1)
    out.write(json.dumps({"ready": d}) + "\n")
    path, pos, buf = os.path.join(d, "control.teleop"), 0, b""
    while True:
        try:
            with open(path, "rb") as f:
                f.seek(pos)
                data = f.read()
        except FileNotFoundError:
            data = b""
        pos += len(data)
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            out.write(line.decode() + "\n")
            if json.loads(line)["frame"].get("stop"):
                sys.exit(0)
        time.sleep(0.005)
    """
)


def telemetry(server: FakeServer, job_id: str = "job_1") -> list[StreamChunkIn]:
    return [
        c
        for m in server.of(JobStream)
        if m.job_id == job_id and m.stream == "telemetry"
        for c in m.chunks
    ]


async def run_teleop_echo(server: FakeServer, job_id: str = "job_1") -> str:
    """Run ECHO, push three frames and the stop through teleop; the job's streams dir as
    the job saw it."""
    await server.send(run_msg([PYTHON, "-c", ECHO], job_id=job_id))
    await server.until(lambda: len(telemetry(server, job_id)) == 1)
    ready = json.loads(telemetry(server, job_id)[0].data)["ready"]
    frames = ['{"push":0.5}', '{"push":-1}', '{"text":"a b"}', '{"stop":true}']
    for seq, frame in enumerate(frames, 1):
        await server.send(
            Teleop(job_id=job_id, attempt=1, stream="control", seq=seq, ts=1000 + seq, frame=frame)
        )
        ack = await server.wait(TeleopAck, lambda a, seq=seq: a.seq == seq and a.job_id == job_id)
        assert (ack.ok, ack.error, ack.stream, ack.attempt) == (True, None, "control", 1)
    fin = await server.wait(JobFinished, lambda f: f.job_id == job_id)
    assert fin.outcome == "succeeded", fin.error
    chunks = telemetry(server, job_id)
    assert [(c.encoding, c.data) for c in chunks[1:]] == [
        ("json", f'{{"seq": {seq}, "ts": {1000 + seq}, "frame": {frame}}}')
        for seq, frame in enumerate(frames, 1)
    ]
    return str(ready)


async def test_an_agent_forwards_streams_and_delivers_teleop_in_order(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server)
    await nursery.start(agent.run)
    seen = await run_teleop_echo(server)
    directory = agent.work_root / "job_1" / "1.streams"
    assert seen == str(directory.absolute())
    teleop_file = directory / "control.teleop"
    assert len(teleop_file.read_text().splitlines()) == 4
    user = agent.job_user
    if user is not None:  # as root: the job user's, as the job's own files are
        assert (directory.stat().st_uid, teleop_file.stat().st_uid) == (user.uid, user.uid)
    # the streams directory is made once the job is pulling: its chunks come after that
    kinds = [r.msg.type for r in server.received if r.msg.type in ("job_phase", "job_stream")]
    assert kinds[0] == "job_phase" and kinds.count("job_phase") == 2
    # a frame for an attempt not running here is answered, not delivered
    await server.send(teleop(1, "{}", attempt=2))
    ack = await server.wait(TeleopAck, lambda a: a.attempt == 2)
    assert (ack.ok, ack.error) == (False, "attempt not running on this node")
    await agent_until(agent, lambda: agent.statistics().running == ())
    await server.send(teleop(9, "{}"))
    ack = await server.wait(TeleopAck, lambda a: a.seq == 9)
    assert (ack.ok, ack.error) == (False, "attempt not running on this node")


@pytest.mark.skipif(bwrap_works() is None, reason="bubblewrap cannot create namespaces here")
async def test_a_sandboxed_agent_job_sees_slash_streams_and_gets_teleop(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server, executor="sandbox", enforce_limits=False)
    await nursery.start(agent.run)
    assert await run_teleop_echo(server, "job_sbx") == "/streams"
    teleop_file = agent.work_root / "job_sbx" / "1.streams" / "control.teleop"
    assert len(teleop_file.read_text().splitlines()) == 4


async def test_a_job_writing_no_stream_sends_no_stream(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server)
    await nursery.start(agent.run)
    await server.send(run_msg(["sh", "-c", 'test -d "$RUNPLANE_STREAMS_DIR" && echo there']))
    fin = await server.wait(JobFinished)
    assert fin.outcome == "succeeded" and server.stdout() == ["there"]
    assert server.of(JobStream) == []


# --------------------------------------------------------------------------- sim-cartpole


def test_sim_cartpole_realtime_publishes_telemetry_and_takes_pushes(tmp_path: Path) -> None:
    manifest = Path(streams.__file__).parents[1] / "stacks" / "builtin" / "sim-cartpole.toml"
    command = tomllib.loads(manifest.read_text())["default_command"]
    directory = tmp_path / "streams"
    directory.mkdir()
    (directory / "control.teleop").write_text(
        '{"seq": 1, "ts": 1, "frame": {"push": 0.75}}\n{"seq": 2, "ts": 2, "frame": {"x": 1}}\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
    env.update(
        RUNPLANE_CONFIG_REALTIME="true",
        RUNPLANE_CONFIG_MAX_STEPS="10",
        RUNPLANE_STREAMS_DIR=str(directory),
    )
    started = time.monotonic()
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("cartpole: realtime at 50 Hz, 10 steps")
    states = [json.loads(line) for line in (directory / "telemetry").read_text().splitlines()]
    assert [s["step"] for s in states] == list(range(1, 11))
    assert all(
        set(s) == {"step", "x", "x_dot", "theta", "theta_dot", "action", "push"} for s in states
    )
    assert [s["push"] for s in states] == [0.75] + [0.0] * 9
    assert took >= 10 * 0.02 * 0.9  # real time: 20 ms a step
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert sum(summary["rewards"]) == 10
