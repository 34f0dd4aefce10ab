"""Unacknowledged ``job_finished`` messages kept on disk by the node agent.

:class:`FinishStore` writes each finish the agent reports to one JSON file in a directory
(``<data dir>/outbox``) and deletes it when the server acknowledges it, so a finish reached
just before the agent stopped or crashed is resent by the next agent run.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from pathlib import Path

from pydantic import ValidationError

from runplane.agent.jobref import JobKey, job_key
from runplane.agent.protocol import JobFinished, encode

log = logging.getLogger("runplane.agent")


class FinishStore:
    """Unacknowledged ``job_finished`` messages on disk, so an agent restart resends them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, key: JobKey) -> Path:
        digest = hashlib.sha256(f"{key[0]}\n{key[1]}".encode()).hexdigest()[:40]
        return self.directory / f"{digest}.json"

    def save(self, msg: JobFinished) -> None:
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            path = self._path(job_key(msg))
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(encode(msg), encoding="utf-8")
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("cannot keep job_finished on disk", extra={"error": str(exc)})

    def delete(self, key: JobKey) -> None:
        with contextlib.suppress(OSError):
            self._path(key).unlink()

    def load(self) -> list[JobFinished]:
        found: list[JobFinished] = []
        try:
            paths = sorted(self.directory.glob("*.json"), key=lambda p: p.stat().st_mtime)
        except OSError:
            return found
        for path in paths:
            try:
                msg = JobFinished.model_validate_json(path.read_bytes())
            except (OSError, ValidationError) as exc:
                log.warning(
                    "dropped unreadable outbox file", extra={"path": str(path), "error": str(exc)}
                )
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            found.append(msg)
        return found
