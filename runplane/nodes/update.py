"""Agent self-update, the server's side (``POST /v1/nodes/{id}/update``, docs/agent.md).

An operator's request is stored on the node's row (``update_target``) before anything is
sent, so a node offline now, or a server restarted meanwhile, still hands it to the agent
at its next hello; the request is cleared once an agent of that version says hello. The
agent's ``update_status`` reports (installing, installed, failed with the reason) are kept
on the row too and quoted in the answer's ``note``. The version compared is the channel
target as written (``POST /v1/admin/channel-target``) against the ``agent_version`` the
agent reports: the same string, or an update is due.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class UpdateState:
    """The self-update columns of a node's row."""

    auto_update: bool
    target: str  # an operator's pending request ('' none)
    version: str  # what the last report is about
    phase: str  # '' | installing | installed | failed
    error: str

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> UpdateState:
        return cls(
            auto_update=bool(row.get("auto_update") or 0),
            target=row.get("update_target") or "",
            version=row.get("update_version") or "",
            phase=row.get("update_phase") or "",
            error=row.get("update_error") or "",
        )


def still_pending(requested: str, agent_version: str) -> bool:
    """At a hello: is the operator's request ``requested`` (the row's ``update_target``,
    '' none) still to be done by an agent of ``agent_version``? One it now fulfils is not
    (the node actor then clears it: ``nodes_repo.clear_update_request``)."""
    return bool(requested) and requested != agent_version


def result(
    node_id: str,
    current: str,
    channel: str,
    target: str | None,
    state: UpdateState,
    *,
    connected: bool,
    sent: bool,
) -> dict[str, Any]:
    """The NodeUpdateResult body (spec): ``note`` says what happens next in a sentence."""
    up_to_date = target is not None and target == current
    if target is None:
        note = (
            f"no target version for channel {channel!r}: set one with POST /v1/admin/channel-target"
        )
    elif up_to_date:
        note = f"the agent already runs {target}, the target of channel {channel!r}"
    elif sent:
        note = (
            f"update to {target} sent: the agent installs it, lets its running jobs "
            "finish, restarts and reconnects"
        )
    elif connected:
        note = f"update to {target} not delivered now: the agent takes it on its next connect"
    else:
        note = f"node offline: it takes {target} on its next connect"
    if state.phase == "failed" and state.error and not up_to_date:
        note += f"; the last attempt ({state.version}) failed: {state.error}"
    return {
        "node_id": node_id,
        "current_version": current,
        "target_version": target or "",
        "channel": channel,
        "note": note,
        "up_to_date": up_to_date,
        "auto_update": state.auto_update,
        "update_sent": sent,
    }
