"""Errors the node agent raises from :meth:`runplane.agent.client.Agent.run`.

:class:`AgentError` is the base (the agent cannot go on; the message is one line for a
human): :class:`AgentRefused` when the server refused it for good (a close code or HTTP
status retrying cannot fix), :class:`AgentReplaced` when another agent connected as the same
node, :class:`DataDirBusy` when another agent already uses the data dir.
"""

from __future__ import annotations


class AgentError(Exception):
    """The agent cannot go on; ``str(exc)`` is one line for a human."""


class AgentRefused(AgentError):
    """The server closed the connection with a code that retrying cannot fix."""

    def __init__(self, code: int | None, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class AgentReplaced(AgentRefused):
    """Another agent connected as this node (close 4409); this one stopped."""


class DataDirBusy(AgentError):
    """Another agent already runs with this data dir."""
