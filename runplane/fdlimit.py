"""The open-file limit of a runplane process: ``runplane serve`` and ``runplane agent``
raise theirs at start.

Every connection, pipe and open file holds a descriptor. The usual default soft
``RLIMIT_NOFILE`` is 1,024 while the hard limit is far higher (524,288 under systemd,
1,048,576 in most containers); left at 1,024 the server stopped near 1,000 connections.
:func:`raise_open_file_limit` lifts the soft limit to the hard one (at most
``NOFILE_CAP``), as nginx's ``worker_rlimit_nofile`` does, and logs both figures once
(``"msg":"open-file limit","soft_before":1024,"soft":524288,"hard":524288``). The hard
limit is the operator's (``ulimit -Hn``, systemd ``LimitNOFILE=``); nothing here raises it.

Child processes inherit the raised soft limit (the jobs a local agent or ``runplane
agent`` runs, too); :data:`started_soft` keeps the limit the process started with.
Standard library only, so both the server and the agent may use it.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("runplane.fdlimit")

#: The soft limit is raised to the hard one, but no higher than this (Linux's default
#: ``fs.nr_open``, the most a process may have).
NOFILE_CAP = 1_048_576

#: The soft limit before :func:`raise_open_file_limit` first ran (``None`` until then).
started_soft: int | None = None


def raise_open_file_limit(logger: logging.Logger = log) -> tuple[int, int]:
    """Raise the soft open-file limit to the hard one (capped) and log both figures once,
    on ``logger`` (the caller's); returns (soft before, soft now). A refusal is logged as
    a warning, never raised."""
    global started_soft
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if started_soft is None:
        started_soft = soft
    target = NOFILE_CAP if hard == resource.RLIM_INFINITY else min(hard, NOFILE_CAP)
    after = soft
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            after = target
        except (ValueError, OSError) as exc:
            logger.warning(
                "could not raise the open-file limit",
                extra={"soft": soft, "hard": hard, "wanted": target, "error": str(exc)},
            )
    logger.info("open-file limit", extra={"soft_before": soft, "soft": after, "hard": hard})
    return soft, after
