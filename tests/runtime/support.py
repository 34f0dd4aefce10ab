"""Actors, messages and helpers shared by the runtime tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio

from runplane.runtime import Actor, Supervisor


@dataclass(frozen=True, slots=True)
class Add:
    n: int = 1


@dataclass(frozen=True, slots=True)
class Get:
    pass


@dataclass(frozen=True, slots=True)
class Crash:
    reason: str = "boom"


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class Wait:
    gate: trio.Event


@dataclass(frozen=True, slots=True)
class Stop:
    pass


CounterMsg = Add | Get | Crash | Sleep | Wait | Stop


class Boom(Exception):
    pass


class Counter(Actor[CounterMsg]):
    """Keeps a count; ``store`` (a dict standing in for the database) is where
    it loads from on start and saves to on every change and on stop."""

    def __init__(self, key: str = "counter", store: dict[str, int] | None = None) -> None:
        self.key = key
        self.store = store if store is not None else {}
        self.count = self.store.get(key, 0)
        self.handled: list[Any] = []
        self.stopped = False

    async def handle(self, msg: CounterMsg) -> Any:
        self.handled.append(msg)
        match msg:
            case Add(n):
                self.count += n
                self.store[self.key] = self.count
                return self.count
            case Get():
                return self.count
            case Crash(reason):
                raise Boom(reason)
            case Sleep(seconds):
                await trio.sleep(seconds)
                return seconds
            case Wait(gate):
                await gate.wait()
                return "released"
            case Stop():
                self.context.stop()
                return "stopping"

    async def on_stop(self) -> None:
        self.stopped = True
        self.store[self.key] = self.count


@asynccontextmanager
async def running(supervisor: Supervisor) -> AsyncIterator[Supervisor]:
    """Run ``supervisor`` for the block, then stop it in order."""
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        try:
            yield supervisor
        finally:
            with trio.CancelScope(shield=True):
                await supervisor.stop()
