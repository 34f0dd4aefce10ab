"""Masking secret values in a job's reports (runplane/agent/mask.py) and putting them
into the env of a run order (runplane/vault.py)."""

from __future__ import annotations

from runplane import vault
from runplane.agent.mask import masked
from runplane.agent.protocol import JobLogs, JobStream, StreamChunkIn


def test_log_lines_and_stream_chunks_are_masked_longest_first() -> None:
    values = vault.maskable(["abc123", "abc123-long", "x"])  # "x" is too short to mask
    assert values == ["abc123-long", "abc123"]
    logs = JobLogs(
        job_id="j",
        attempt=1,
        lines=[("stdout", "a abc123-long b abc123 x"), ("stderr", "clean", "svc")],
    )
    out = masked(logs, values)
    assert isinstance(out, JobLogs)
    assert out.lines == [("stdout", "a *** b *** x"), ("stderr", "clean", "svc")]
    chunk = StreamChunkIn(data='{"k": "abc123"}', encoding="json", ts=1)
    stream = masked(JobStream(job_id="j", attempt=1, stream="s", chunks=[chunk]), values)
    assert isinstance(stream, JobStream) and stream.chunks[0].data == '{"k": "***"}'
    assert masked(logs, []) is logs


def test_references_and_substitution() -> None:
    env = {"A": "Bearer ${secrets.TOKEN}", "B": "${secrets.X}-${secrets.Y}", "C": "plain"}
    assert vault.references(env) == {"A": ["TOKEN"], "B": ["X", "Y"]}
    got = vault.substitute(env, {"TOKEN": "t0k", "X": "x"})
    assert got == {"A": "Bearer t0k", "B": "x-${secrets.Y}", "C": "plain"}
