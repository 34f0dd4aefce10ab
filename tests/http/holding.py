"""An actor held busy by a test: a :class:`Hold` message blocks its ``handle`` until the
test releases it, so its mailbox fills and its asks go unanswered (overload tests)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio

from runplane.runtime import DEFAULT_ASK_TIMEOUT, ActorRef


@dataclass(eq=False)
class Hold:
    """A message the patched actor blocks on until ``release`` is set."""

    entered: trio.Event = field(default_factory=trio.Event)
    release: trio.Event = field(default_factory=trio.Event)


def holdable(monkeypatch: pytest.MonkeyPatch, actor_class: Any) -> None:
    """``actor_class`` blocks on a :class:`Hold`; everything else as before."""
    original = actor_class.handle

    async def handle(self: Any, msg: Any) -> object:
        if isinstance(msg, Hold):
            msg.entered.set()
            await msg.release.wait()
            return None
        return await original(self, msg)

    monkeypatch.setattr(actor_class, "handle", handle)


@contextmanager
def held() -> Iterator[Hold]:
    """Yields a Hold; released on leaving."""
    hold = Hold()
    try:
        yield hold
    finally:
        hold.release.set()


async def hold_actor(ref: ActorRef[Any], hold: Hold) -> None:
    """Send ``hold`` and wait until the actor is blocked on it."""
    ref.try_tell(hold)
    with trio.fail_after(DEFAULT_ASK_TIMEOUT):
        await hold.entered.wait()
