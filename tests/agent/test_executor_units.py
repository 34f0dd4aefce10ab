"""Executor pieces without processes: metric lines, line splitting, log batching (fake clock)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from runplane.agent.execspec import Event, LogLines, Metric, Started
from runplane.agent.metrics_line import (
    MetricLineError,
    ParsedMetric,
    is_metric_line,
    parse_metric_line,
    quote,
)
from runplane.agent.output import Item, LineSplitter, batch_events

# --------------------------------------------------------------------------- metric lines


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('::metric {"step": 3, "loss": 0.25}', ParsedMetric(3, {"loss": 0.25})),
        ('::metric {"loss": 1}', ParsedMetric(None, {"loss": 1.0})),
        ('::metric   {"step": null, "a": -2.5e3}  ', ParsedMetric(None, {"a": -2500.0})),
        ('::metric\t{"step": 0, "a": 1, "b": 2}', ParsedMetric(0, {"a": 1.0, "b": 2.0})),
        (
            '::metric {"acc": 0.9, "ok": true, "tag": "x", "n": null, "l": [1], "nan": NaN}',
            ParsedMetric(None, {"acc": 0.9}),
        ),
    ],
)
def test_metric_lines_parse(line: str, expected: ParsedMetric) -> None:
    assert parse_metric_line(line) == expected


@pytest.mark.parametrize("line", ["hello", "::metrics {}", ' ::metric {"a": 1}', "::warning x", ""])
def test_other_lines_are_not_metric_lines(line: str) -> None:
    assert not is_metric_line(line)
    assert parse_metric_line(line) is None


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("::metric", "missing JSON object"),
        ("::metric   ", "missing JSON object"),
        ("::metric {loss: 1}", "invalid JSON"),
        ('::metric {"loss": 1', "invalid JSON"),
        ("::metric [1, 2]", "expected a JSON object, got an array"),
        ("::metric 3", "expected a JSON object, got a number"),
        ('::metric {"step": 1.5, "a": 1}', "step must be a non-negative integer, got 1.5"),
        ('::metric {"step": -1, "a": 1}', "step must be a non-negative integer, got -1"),
        ('::metric {"step": true, "a": 1}', "step must be a non-negative integer, got true"),
        ('::metric {"step": "3", "a": 1}', 'step must be a non-negative integer, got "3"'),
        ('::metric {"step": 3}', "no numeric values"),
        ('::metric {"flag": true, "s": "x"}', "no numeric values (ignored non-numeric: flag, s)"),
        ('::metric {"big": ' + "9" * 400 + "}", "no numeric values (ignored non-numeric: big)"),
        ("::metric " + "[" * 100_000, "invalid JSON"),
    ],
)
def test_malformed_metric_lines_say_why(line: str, reason: str) -> None:
    with pytest.raises(MetricLineError) as info:
        parse_metric_line(line)
    assert reason in str(info.value)


def test_quote_cuts_long_lines() -> None:
    assert quote("short") == "short"
    assert quote("x" * 500) == "x" * 200 + "..."


# --------------------------------------------------------------------------- line splitting


def test_splitter_handles_lines_across_chunks() -> None:
    s = LineSplitter("stdout", max_bytes=16)
    assert s.feed(b"hel") == []
    assert s.feed(b"lo\nwor") == [("stdout", "hello")]
    assert s.feed(b"ld\r\n\n") == [("stdout", "world"), ("stdout", "")]
    assert s.feed(b"tail") == []
    assert s.close() == [("stdout", "tail")]
    assert s.close() == []


def test_splitter_splits_long_lines_and_says_so() -> None:
    s = LineSplitter("stderr", max_bytes=4)
    out = s.feed(b"abcdefghij") + s.feed(b"\nok\n")
    assert out == [
        ("stderr", "abcd"),
        ("stderr", "efgh"),
        ("stderr", "ij"),
        ("system", "stderr line of 10 bytes was split into 3 lines of at most 4 bytes"),
        ("stderr", "ok"),
    ]


def test_splitter_line_of_exactly_the_limit_is_not_split() -> None:
    s = LineSplitter("stdout", max_bytes=4)
    assert s.feed(b"abcd") == []
    assert s.feed(b"\r\n") == [("stdout", "abcd")]
    assert s.feed(b"abcde") == [("stdout", "abcd")]
    assert s.close() == [
        ("stdout", "e"),
        ("system", "stdout line of 5 bytes was split into 2 lines of at most 4 bytes"),
    ]


def test_splitter_does_not_cut_utf8_characters() -> None:
    s = LineSplitter("stdout", max_bytes=5)
    text = "aé€😀"  # 1 + 2 + 3 + 4 bytes
    out = s.feed(text.encode() + b"\n")
    pieces = [t for stream, t in out if stream == "stdout"]
    assert "".join(pieces) == text
    assert all(len(p.encode()) <= 5 for p in pieces)


def test_splitter_replaces_invalid_utf8() -> None:
    s = LineSplitter("stdout")
    assert s.feed(b"a\xffb\n") == [("stdout", "a\ufffdb")]


# --------------------------------------------------------------------------- batching


async def _collect(
    items: list[tuple[float, Item]], max_lines: int = 4, interval: float = 0.05
) -> list[tuple[float, Event]]:
    """Feed ``(delay, item)`` pairs to the batcher; return ``(time, event)`` it emitted."""
    got: list[tuple[float, Event]] = []
    start = trio.current_time()

    async def emit(event: Event) -> None:
        got.append((round(trio.current_time() - start, 3), event))

    send, recv = trio.open_memory_channel[Item](0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(batch_events, recv, emit, max_lines, interval)
        async with send:
            for delay, item in items:
                await trio.sleep(delay)
                await send.send(item)
            await trio.sleep(1)
    return got


async def test_lines_are_flushed_50ms_after_the_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    got = await _collect(
        [(0, [("stdout", "a")]), (0.02, [("stderr", "b")]), (0.1, [("stdout", "c")])]
    )
    assert got == [
        (0.05, LogLines((("stdout", "a"), ("stderr", "b")))),
        (0.17, LogLines((("stdout", "c"),))),
    ]


async def test_full_batches_go_at_once(autojump_clock: trio.testing.MockClock) -> None:
    lines = [("stdout", str(i)) for i in range(10)]
    got = await _collect([(0, lines)])  # type: ignore[list-item]
    assert [(t, len(e.lines)) for t, e in got] == [(0, 4), (0, 4), (0.05, 2)]  # type: ignore[union-attr]
    assert [line for _, e in got for line in e.lines] == lines  # type: ignore[union-attr]


async def test_other_events_flush_pending_lines_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    metric = Metric(step=1, values={"loss": 0.5})
    started = Started(pid=1, stage="command")
    got = await _collect(
        [(0, [("system", "x")]), (0.01, started), (0.01, metric), (0, [("stdout", "y")])]
    )
    assert got == [
        (0.01, LogLines((("system", "x"),))),
        (0.01, started),
        (0.02, metric),
        (0.07, LogLines((("stdout", "y"),))),
    ]


async def test_end_of_input_flushes_at_once(autojump_clock: trio.testing.MockClock) -> None:
    got: list[Event] = []

    async def emit(event: Event) -> None:
        got.append(event)

    send, recv = trio.open_memory_channel[Item](10)
    send.send_nowait([("stdout", "last")])
    send.close()
    start = trio.current_time()
    await batch_events(recv, emit, 256, 0.05)
    assert trio.current_time() == start
    assert got == [LogLines((("stdout", "last"),))]
