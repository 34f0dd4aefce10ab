"""A node's status and what happened to an attempt on it, as enums (stored as their
string values: ``nodes.status``, the ``attempts_*`` reliability counters)."""

from __future__ import annotations

import enum


class NodeStatus(enum.StrEnum):
    """``online`` (its agent is connected), ``disconnected`` (gone, within its grace),
    ``draining`` (connected, taking no new work), ``offline`` (lost, or never back)."""

    ONLINE = "online"
    DISCONNECTED = "disconnected"
    DRAINING = "draining"
    OFFLINE = "offline"


class AttemptOutcome(enum.StrEnum):
    """What one attempt did on a node, for its reliability: ``placed`` there, ``lost``
    with it (the node went away), or finished ``ok`` (whatever the job's own outcome)."""

    PLACED = "placed"
    LOST = "lost"
    OK = "ok"
