"""Teleop frames waiting for their agent's confirmation.

The job actor numbers a teleop frame, registers it here and sends it to the node; the
route waits here (bounded); the agent WebSocket handler resolves it when the agent's
``teleop_ack`` arrives. A frame whose node goes away or never answers times out (502).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

AckKey = tuple[str, int, str, int]  # job_id, attempt, stream, seq
#: How long a teleop send waits for the agent's confirmation before answering 502.
ACK_TIMEOUT_SEC = 2.0


@dataclass(slots=True)
class Pending:
    done: trio.Event = field(default_factory=trio.Event)
    ok: bool = False
    error: str | None = None


class TeleopAcks:
    def __init__(self) -> None:
        self._pending: dict[AckKey, Pending] = {}

    def expect(self, key: AckKey) -> Pending:
        pending = Pending()
        self._pending[key] = pending
        return pending

    def resolve(self, key: AckKey, ok: bool, error: str | None) -> bool:
        """Record the agent's answer; False when nobody waits for it (late or unknown)."""
        pending = self._pending.pop(key, None)
        if pending is None:
            return False
        pending.ok, pending.error = ok, error
        pending.done.set()
        return True

    def forget(self, key: AckKey) -> None:
        self._pending.pop(key, None)

    async def wait(self, key: AckKey, pending: Pending, within: float = ACK_TIMEOUT_SEC) -> bool:
        """True when the agent answered within ``within`` seconds (then read ``pending``)."""
        with trio.move_on_after(within):
            await pending.done.wait()
        self.forget(key)
        return pending.done.is_set()

    def __len__(self) -> int:
        return len(self._pending)
