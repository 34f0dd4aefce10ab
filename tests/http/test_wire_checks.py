"""The checks on what an agent sends (runplane/http/wire_checks.py, docs/agent.md "Checks on
what an agent sends"): every frame, before anything acts on it."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from pydantic import ValidationError

from runplane.agent import protocol as p
from runplane.agent.metrics_line import MetricLineError, parse_metric_line
from runplane.http.wire_checks import (
    MAX_FRAME_BYTES,
    Dropped,
    Unknown,
    WireRefused,
    check_frame,
    failed_finish,
    one_line,
)

FACTS: dict[str, Any] = {"name": "n1", "cpu_cores": 2, "ram_gb": 4, "arch": "x86_64", "os": "linux"}


def hello(**facts: Any) -> str:
    body = {"type": "hello", "protocol": 1, "agent_version": "t", "facts": {**FACTS, **facts}}
    return json.dumps(body)


def refused(frame: str | dict[str, Any]) -> WireRefused:
    raw = frame if isinstance(frame, str) else json.dumps(frame)
    with pytest.raises(WireRefused) as caught:
        check_frame(raw)
    return caught.value


def test_a_good_hello_passes_as_it_was() -> None:
    gpu = {"model": "NVIDIA H100 80GB HBM3", "vram_gb": 80, "index": 0, "uuid": "GPU-1a2b"}
    msg = check_frame(hello(gpus=[gpu], capabilities=["docker", "simulator"]))
    assert isinstance(msg, p.Hello)
    assert msg.facts.gpus[0].model == "NVIDIA H100 80GB HBM3"
    assert msg.facts.capabilities == ["docker", "simulator"]


@pytest.mark.parametrize(
    ("facts", "field", "why"),
    [
        ({"name": "a\x00b"}, "facts.name", "contains the control character \\u0000"),
        ({"name": "a\nb"}, "facts.name", "contains the control character \\u000a"),
        ({"name": "a\ud800"}, "facts.name", "contains the control character \\ud800"),
        ({"name": "x" * 257}, "facts.name", "is 257 characters, more than 256"),
        ({"os": "linux\x7f"}, "facts.os", "contains the control character \\u007f"),
        ({"gpus": [{"model": "m\x1b"}]}, "facts.gpus.0.model", "contains the control"),
        ({"capabilities": ["ok", "b\tad"]}, "facts.capabilities.1", "contains the control"),
        ({"capabilities": ["c"] * 1025}, "facts.capabilities", "1025 items, more than 1024"),
        ({"gpus": [{"model": "m"}] * 257}, "facts.gpus", "257 items, more than 256"),
        ({"cpu_cores": 100_000}, "facts.cpu_cores", "100000 is outside 1 to 65536"),
        ({"ram_gb": 2**40}, "facts.ram_gb", "is outside 0 to 1048576"),
        ({"gpus": [{"model": "m", "vram_gb": 10**9}]}, "facts.gpus.0.vram_gb", "outside"),
        ({"dlperf": 1e300}, "facts.dlperf", "outside"),
        ({"images": {"digests": ["sha256:\x00"]}}, "facts.images.digests.0", "control"),
    ],
)
def test_a_hostile_hello_is_refused_naming_the_field(
    facts: dict[str, Any], field: str, why: str
) -> None:
    error = refused(hello(**facts))
    assert error.kind == "hello" and error.field == field
    assert why in error.why
    assert "\n" not in str(error) and str(error).startswith(f"{field}: ")


def test_size_depth_and_numbers_the_parser_cannot_hold_are_refused() -> None:
    big = hello(capabilities=["x" * 200] * 60_000)
    assert len(big) > MAX_FRAME_BYTES
    assert refused(big).field == "(frame)"
    deep = '{"type": "hello", "x": ' + "[" * 10_000 + "]" * 10_000 + "}"
    assert "nested deeper than 64" in refused(deep).why  # the parser's recursion caught
    shallow_but_deep = '{"type": "hello", "x": ' + "[" * 100 + "]" * 100 + "}"
    assert "nested deeper than 64" in refused(shallow_but_deep).why
    assert "outside int64" in refused(hello(cpu_cores=2**70)).why
    assert "NaN is not a JSON number" in refused(hello(dlperf=float("nan"))).why
    assert "is not finite" in refused(hello().replace('"ram_gb": 4', '"ram_gb": 1e999')).why


def test_what_is_not_a_message_raises_validation_naming_the_field() -> None:
    with pytest.raises(ValidationError) as caught:
        check_frame(hello(cpu_cores=-1))
    assert one_line(caught.value) == "facts.cpu_cores: Input should be greater than or equal to 1"
    with pytest.raises(ValidationError) as caught:
        check_frame("{not json")
    assert one_line(caught.value).startswith("(frame): Invalid JSON")


def test_a_frame_of_an_unknown_type_is_unknown_even_when_hostile() -> None:
    unknown = check_frame(json.dumps({"type": "from_the_future\x00", "x": [1]}))
    assert isinstance(unknown, Unknown) and unknown.kind == "from_the_future\\x00"
    # too deep is refused before its type is read (the parser would recurse)
    deep = '{"type": "from_the_future", "x": ' + "[" * 5000 + "]" * 5000 + "}"
    assert refused(deep).field == "(frame)"


def test_free_text_keeps_tabs_and_escapes_but_not_nul_or_lone_surrogates() -> None:
    frame = {
        "type": "job_logs",
        "job_id": "j1",
        "attempt": 1,
        "lines": [["stdout", "a\x00b\tc\x1b[31m"], ["stderr", "x\ud83d", "web"]],
    }
    msg = check_frame(json.dumps(frame))
    assert isinstance(msg, p.JobLogs)
    assert msg.lines == [("stdout", "a\ufffdb\tc\x1b[31m"), ("stderr", "x\ufffd", "web")]
    # a service name is a name, not free text
    frame["lines"] = [["stdout", "fine", "we\nb"]]
    assert refused(frame).field == "lines.0.2"


def test_an_error_text_is_cleaned_and_cut() -> None:
    frame = {"type": "update_status", "version": "1.2", "phase": "failed", "error": "\x00" * 9000}
    msg = check_frame(json.dumps(frame))
    assert isinstance(msg, p.UpdateStatus) and msg.error is not None
    assert len(msg.error) == 4096 and msg.error.endswith("...") and "\x00" not in msg.error


def test_metric_names_and_values() -> None:
    base = {"type": "job_metric", "job_id": "j1", "attempt": 1}
    ok = check_frame(json.dumps({**base, "step": 3, "values": {"attempt": -5.0, "loss": 0.1}}))
    assert isinstance(ok, p.JobMetric) and ok.values["attempt"] == -5.0  # a metric, not a field
    assert refused({**base, "values": {"lo\x00ss": 1.0}}).field == "values.lo\\x00ss"
    assert refused('{"type": "job_metric", "job_id": "j", "attempt": 1, "values": {"a": NaN}}')
    assert refused({**base, "step": -1, "values": {}}).field == "step"
    many = {f"m{i}": 1.0 for i in range(10_001)}
    assert "more than 10000" in refused({**base, "values": many}).why


def test_stream_chunks() -> None:
    def chunks(*items: tuple[str, str]) -> list[p.StreamChunkIn]:
        frame = {
            "type": "job_stream",
            "job_id": "j1",
            "attempt": 1,
            "stream": "cam",
            "chunks": [{"data": data, "encoding": enc, "ts": 1} for data, enc in items],
        }
        msg = check_frame(json.dumps(frame))
        assert isinstance(msg, p.JobStream)
        return msg.chunks

    got = chunks(
        ('{"a": [1, 2]}', "json"),
        ("[" * 70 + "]" * 70, "json"),
        ('{"a": NaN}', "json"),
        ("{oops", "json"),
        ("t\x00xt", "text"),
        ("aGk=", "base64"),
    )
    assert [c.encoding for c in got] == ["json", "text", "text", "text", "text", "base64"]
    assert got[4].data == "t\ufffdxt"
    assert chunks(("[" * 64 + "]" * 64, "json"))[0].encoding == "json"  # 64 levels are fine


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"exit_code": 2**40}, "exit_code"),
        ({"final_metrics": {"a\x01": 1.0}}, "final_metrics.a\\x01"),
        ({"signal": "SIG\x00TERM"}, "signal"),
        ({"artifacts": [{"ref": "/v1/artifacts/j1/" + "a" * 5000}]}, "artifacts.0.ref"),
    ],
)
def test_a_refused_finish_stands_for_a_failed_attempt(extra: dict[str, Any], field: str) -> None:
    frame = {"type": "job_finished", "job_id": "j1", "attempt": 2, "outcome": "succeeded", **extra}
    error = refused(frame)
    assert error.field == field
    finish = failed_finish(error)
    assert finish is not None
    assert (finish.job_id, finish.attempt, finish.outcome) == ("j1", 2, "failed")
    assert finish.error == f"the agent's finish report was refused: {field}: {error.why}"


def test_a_refused_finish_that_names_no_attempt_cleanly_stands_for_nothing() -> None:
    base = {"type": "job_finished", "outcome": "failed", "exit_code": -(2**40)}
    assert failed_finish(refused({**base, "job_id": "j\x00", "attempt": 1})) is None
    assert failed_finish(refused({**base, "job_id": "j", "attempt": 2**40})) is None
    assert failed_finish(refused({**base, "job_id": "j", "attempt": "1"})) is None
    log_frame = {"type": "job_logs", "job_id": "j", "attempt": 1, "lines": [["stdout", "a", "\n"]]}
    assert failed_finish(refused(log_frame)) is None


def test_a_good_finish_with_an_artifact_passes() -> None:
    artifact = {"artifact": "model", "ref": "/v1/artifacts/j1/out/m.bin", "sha256": "0" * 64}
    frame = {
        "type": "job_finished",
        "job_id": "j1",
        "attempt": 1,
        "outcome": "succeeded",
        "exit_code": -9,
        "error": "line one\nline two",
        "artifacts": [{**artifact, "size": 3}],
    }
    msg = check_frame(json.dumps(frame))
    assert isinstance(msg, p.JobFinished) and msg.error == "line one\nline two"


def test_dropped_messages_are_logged_once_per_field_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dropped = Dropped("node_1")
    frame = {"type": "job_metric", "job_id": "j1", "attempt": 1, "values": {"a\x00": 1.0}}
    with caplog.at_level(logging.WARNING, logger="runplane.nodes"):
        for _ in range(3):
            dropped.note(refused(frame))
        dropped.note(refused({**frame, "values": {}, "step": -2}))
    lines = [r for r in caplog.records if r.getMessage() == "agent message dropped"]
    assert [r.__dict__["field"] for r in lines] == ["values.a\\x00", "step"]
    assert dropped.count == 4


def test_the_agent_leaves_out_metric_names_the_server_would_refuse() -> None:
    """A job's ``::metric`` line: names with a control character or too long are ignored
    by the agent, so an honest agent never sends a metric the server drops."""
    line = '::metric {"step": 1, "loss": 0.5, "lo\\nss": 1, "' + "m" * 257 + '": 2}'
    parsed = parse_metric_line(line)
    assert parsed is not None and parsed.values == {"loss": 0.5}
    frame = {"type": "job_metric", "job_id": "j1", "attempt": 1, "values": parsed.values}
    assert isinstance(check_frame(json.dumps(frame)), p.JobMetric)
    with pytest.raises(MetricLineError, match="step must be a non-negative integer"):
        parse_metric_line('::metric {"step": 9223372036854775808, "a": 1}')


def test_the_fast_paths_for_lines_and_chunks_check_as_the_walk_does() -> None:
    logs = {"type": "job_logs", "job_id": "j1", "attempt": 1}
    lines = [["stdout", "ok"]] * 5 + [["stderr", "x", "svc\x1b"]]
    assert refused({**logs, "lines": lines}).field == "lines.5.2"
    assert refused({**logs, "lines": [["stdout", "ok"], ["std\x00out", "x"]]}).field == "lines.1.0"
    with pytest.raises(ValidationError):  # not shaped as lines: the walk, then validation
        check_frame(json.dumps({**logs, "lines": [["stdout", "ok"], "bare"]}))
    assert refused({**logs, "lines": [["stdout", 1e999]]}).field == "lines.0.1"
    stream = {"type": "job_stream", "job_id": "j1", "attempt": 1, "stream": "cam"}
    chunks: list[dict[str, Any]] = [{"data": "d", "ts": i} for i in range(5)]
    gpus = [{"model": "m", "vram_gb": 80}, {"model": "m", "vram_gb": 10**9}]
    assert refused(hello(gpus=gpus)).field == "facts.gpus.1.vram_gb"  # a list, field by field
    huge = '{"data": "d", "ts": 99999999999999999999}'
    frame = json.dumps({**stream, "chunks": chunks})[:-2] + ", " + huge + "]}"
    assert refused(frame).field == "chunks.5.ts"
    with pytest.raises(ValidationError):
        check_frame(json.dumps({**stream, "chunks": [{"data": "d", "ts": 1, "more": 1}]}))
    assert refused({**stream, "chunks": [{"data": "d", "ts": 1, "mo\x00re": 1}]})
    msg = check_frame(json.dumps({**stream, "chunks": [{"data": "a\x00", "ts": 1}] * 3}))
    assert isinstance(msg, p.JobStream) and {c.data for c in msg.chunks} == {"a\ufffd"}


def test_what_a_real_agent_sends_while_it_drains_passes() -> None:
    """A self-update's drain has no deadline: the agent says 1e9 s (it was once dropped
    as out of range, so the server never saw the node draining)."""
    from runplane.agent.lifecycle import NO_DEADLINE_SEC

    msg = check_frame(p.encode(p.Draining(deadline_sec=NO_DEADLINE_SEC)))
    assert isinstance(msg, p.Draining) and msg.deadline_sec == NO_DEADLINE_SEC
    with pytest.raises(WireRefused, match="deadline_sec"):
        check_frame(json.dumps({"type": "draining", "deadline_sec": 1e300}))
