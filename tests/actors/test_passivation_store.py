"""Registry passivation with a real store: a passivated actor's state is rows, and it comes
back from them on the next message (on every backend)."""

from __future__ import annotations

from dataclasses import dataclass

import trio

from runplane.persistence import Store
from runplane.runtime import Actor, ActorKind, Registry, Supervisor


@dataclass(frozen=True, slots=True)
class Add:
    n: int


COUNTER = ActorKind[Add]("counter")


class Counter(Actor[Add]):
    def __init__(self, store: Store, key: str, count: int) -> None:
        self.store, self.key, self.count = store, key, count

    async def handle(self, msg: Add) -> int:
        self.count += msg.n
        return self.count

    async def on_stop(self) -> None:  # passivation persists
        await self.store.execute(
            "INSERT INTO meta (key, value, updated_at) VALUES (?, ?, 0) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (self.key, str(self.count)),
        )


async def test_passivated_actor_resumes_from_store(store: Store, autojump_clock: object) -> None:
    activations: list[str] = []

    async def activate(id: str) -> Counter:
        activations.append(id)
        row = await store.fetchone("SELECT value FROM meta WHERE key = ?", (f"counter/{id}",))
        return Counter(store, f"counter/{id}", int(row["value"]) if row else 0)

    sup = Supervisor(name="test")
    registry = Registry(sup)
    registry.register(COUNTER, activate, idle_timeout=30.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        assert await registry.ask(COUNTER, "a", Add(2)) == 2
        assert await registry.ask(COUNTER, "a", Add(3)) == 5
        await trio.sleep(31)  # idle past the timeout: passivated
        # on_stop's write is in flight; the registry exposes only the counter
        while registry.statistics().passivations < 1:  # noqa: ASYNC110
            await trio.sleep(0.01)
        assert not registry.active(COUNTER, "a")
        row = await store.fetchone("SELECT value FROM meta WHERE key = ?", ("counter/a",))
        assert row is not None and row["value"] == "5"
        assert await registry.ask(COUNTER, "a", Add(1)) == 6  # re-activated from the row
        assert activations == ["a", "a"]
        stats = registry.statistics()
        assert (stats.activations, stats.passivations) == (2, 1)
        await sup.stop()
