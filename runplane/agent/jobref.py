"""The attempt a message is about (:data:`JobKey`: job id, attempt) and whether a job
id/attempt from the server may name a working directory (:func:`check_job_ref`)."""

from __future__ import annotations

import re
from typing import TypeAlias

from runplane.agent.protocol import (
    Cancel,
    FinishedAck,
    JobFinished,
    JobLogs,
    JobMetric,
    JobPhase,
    JobReleased,
    JobStream,
    Run,
    RunningJob,
    Teleop,
    TeleopAck,
)

JobKey: TypeAlias = tuple[str, int]
_About: TypeAlias = (
    JobPhase
    | JobLogs
    | JobMetric
    | JobStream
    | JobFinished
    | JobReleased
    | TeleopAck
    | Run
    | Cancel
    | FinishedAck
    | Teleop
    | RunningJob
)

_JOB_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


def check_job_ref(job_id: str, attempt: int) -> str | None:
    """Why a job id/attempt cannot name a workdir (``None`` when it can)."""
    if not _JOB_ID_RE.fullmatch(job_id):
        return f"invalid job id {job_id[:140]!r}: expected letters, digits, '_', '-', '.'"
    if attempt < 1:
        return f"invalid attempt {attempt}: must be >= 1"
    return None


def job_key(msg: _About) -> JobKey:
    """The job attempt a message is about: ``(job_id, attempt)``."""
    return (msg.job_id, msg.attempt)
