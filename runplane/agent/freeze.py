"""A frozen agent (docs/agent.md "A frozen agent"): one that did not run for a while
(SIGSTOP, a suspended VM, a stalled host) while its server went on. Past 3 missed
heartbeats the server takes the node for lost and requeues its attempts, which may then
run, and end, elsewhere; so what the agent held from before the freeze is stale: the run
orders waiting in its socket, and the attempts it accepted but had not started yet.

:class:`FreezeWatch` ticks a clock every :data:`TICK_SEC`; a tick (or a look) that comes
more than ``limit`` seconds after the last one counts a freeze: its ``generation`` goes
up. Whoever held something from before compares the generation it saw then with the one
now (:meth:`FreezeWatch.since`). The look detects a freeze itself, so the answer does not
depend on which task trio runs first after the process resumes.
"""

from __future__ import annotations

import logging

import trio

log = logging.getLogger("runplane.agent")

#: how often the clock ticks
TICK_SEC = 0.5
#: a freeze is a gap longer than max(this, 2 heartbeats) (the server waits 3)
FROZEN_MIN_SEC = 2.0


class FreezeWatch:
    def __init__(self, limit: float = FROZEN_MIN_SEC) -> None:
        #: a gap longer than this is a freeze (the session sets it from its heartbeat)
        self.limit = limit
        #: how many freezes were seen
        self.generation = 0
        self._ticked: float | None = None

    def set_heartbeat(self, heartbeat_sec: float) -> None:
        self.limit = max(FROZEN_MIN_SEC, 2 * heartbeat_sec)

    def look(self) -> int:
        """The generation now, counting a freeze if the clock has not ticked for longer
        than the limit (the tick is then moved to now)."""
        now = trio.current_time()
        if self._ticked is not None and now - self._ticked > self.limit:
            self.generation += 1
            log.warning(
                "this agent was frozen: what it held from before is stale",
                extra={"frozen_sec": round(now - self._ticked, 1), "limit_sec": self.limit},
            )
            self._ticked = now
        return self.generation

    def since(self, generation: int) -> bool:
        """Whether the agent was frozen since ``generation`` was seen."""
        return self.look() != generation

    async def tick_forever(self) -> None:
        while True:
            self.look()
            self._ticked = trio.current_time()
            await trio.sleep(TICK_SEC)
