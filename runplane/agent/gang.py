"""A gang's rank 0 on this node (docs/jobs.md "Multi-node jobs"): before its process
starts, the agent checks it can listen on the master port the server chose, so a port
taken by something else fails the attempt at once, saying so, instead of leaving the
other ranks waiting for a rendezvous that never comes."""

from __future__ import annotations

import socket


def master_port_refusal(port: int | None) -> str | None:
    """Why rank 0 cannot listen on ``port`` here (None: it can, or this is no rank 0)."""
    if port is None:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as exc:
            return f"gang master port {port} is not free on this node: {exc.strerror or exc}"
    return None
