"""The lean lanes: the hottest routes answered by plain ASGI handlers in front of Quart
(docs/lean-lanes.md), with the same rules, checks, logs and bytes as Quart's answer."""

from .lanes import Lane, LeanLanes, Next

__all__ = ["Lane", "LeanLanes", "Next"]
