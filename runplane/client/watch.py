"""Following a pipeline run or a session from the CLI (docs/cli.md): each stage's phase
and wait reason on stderr as they change, every stage's final phase and exit code at the
end; Ctrl-C stops following, never the run, and says how to cancel it."""

from __future__ import annotations

import sys
import time
from typing import NoReturn

from .api import TERMINAL, Client, JSONObject
from .common import EXIT_CANCELLED, err

#: Seconds between two looks at a followed run.
POLL_SEC = 1.0
_STAGE_END = TERMINAL | {"skipped"}


def say(line: str) -> None:
    """One line on stderr, as it is (no markup, never wrapped)."""
    err.print(line, markup=False, soft_wrap=True)


def stage_line(stage: JSONObject, job: JSONObject | None) -> str:
    """``train queued: no node meets: ...``, ``b failed (exit 2)``, ``c skipped: it needs
    'b', which failed``: the stage's phase with what explains it (its job's wait reason
    while it waits, its exit code and error once it ended)."""
    phase = str(stage.get("phase"))
    line = f"{stage['name']} {phase}"
    code = job.get("exit_code") if job else None
    if phase in _STAGE_END and code is not None:
        line += f" (exit {code})"
    reason = (job or {}).get("wait_reason") or stage.get("wait_reason") or ""
    if phase in ("pending", "queued") and reason:
        return f"{line}: {reason}"
    error = str(stage.get("error") or "").removeprefix(f"{phase}: ")
    if phase in _STAGE_END and phase != "succeeded" and error and error != f"exit code {code}":
        line += f": {error}"
    return line


def stage_jobs(client: Client, run_id: str) -> dict[str, JSONObject]:
    """The run's stage jobs by id (earlier retries' included)."""
    return {j["job_id"]: j for j in client.find_jobs(pipeline=run_id, limit=5000)}


def stage_lines(run: JSONObject, jobs: dict[str, JSONObject]) -> dict[str, str]:
    return {
        s["name"]: stage_line(s, jobs.get(s.get("job_id") or "")) for s in run.get("stages") or []
    }


def follow_pipeline(client: Client, run: JSONObject) -> JSONObject:
    """Print each stage's changes until the run ends, then every stage's final line; the
    ended run. Ctrl-C: says the run keeps running and how to cancel it, exit 130."""
    run_id = run["pipeline_run_id"]
    seen: dict[str, str] = {}
    try:
        while True:
            jobs = stage_jobs(client, run_id)
            for name, line in stage_lines(run, jobs).items():
                if seen.get(name) != line:
                    seen[name] = line
                    say(line)
            if run["status"] in TERMINAL:
                break
            time.sleep(POLL_SEC)
            run = client.pipeline(run_id)
    except KeyboardInterrupt:
        stopped(f"{run_id} keeps running: cancel it with runplane pipeline cancel {run_id}")
    say(f"{run_id} {run['status']}:")
    for line in seen.values():
        say(f"  {line}")
    return run


def stopped(what: str) -> NoReturn:
    """Ctrl-C while following: the thing followed goes on; exit 130."""
    say(f"stopped following; {what}")
    sys.exit(EXIT_CANCELLED)


def pod_wait(client: Client, view: JSONObject) -> str:
    """Why a ``launching`` session's pod job waits ('' when it does not, or not yet)."""
    if view.get("phase") != "launching" or not view.get("job_id"):
        return ""
    job = client.job(view["job_id"])
    reason = job.get("wait_reason") or ""
    return f"pod job {job['job_id']} {job['phase']}" + (f": {reason}" if reason else "")


def follow_session(client: Client, view: JSONObject) -> JSONObject:
    """Wait while the session is ``launching``, printing its pod job's wait reason as it
    changes; the session once it is up or ended. Ctrl-C: it keeps going."""
    session_id = view["id"]
    said = ""
    try:
        while view["phase"] == "launching":
            why = pod_wait(client, view)
            if why and why != said:
                said = why
                say(why)
            time.sleep(POLL_SEC)
            view = client.session(session_id)
    except KeyboardInterrupt:
        stopped(f"{session_id} keeps going: stop it with runplane session stop {session_id}")
    return view
