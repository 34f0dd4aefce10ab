"""Release-channel targets: which agent version each channel (stable, beta, ...) should run.

A small actor owning the operator's channel -> version map; it is persisted in the store's
``meta`` table before a change is acknowledged, and reloaded on (re)start.
"""

from __future__ import annotations

from dataclasses import dataclass

from runplane.persistence import Store, from_json, now_ms, to_json
from runplane.runtime import Actor, ActorRef, Asks

META_KEY = "channel_targets"


@dataclass(frozen=True, slots=True)
class SetChannelTarget(Asks[dict[str, str]]):
    channel: str
    version: str


@dataclass(frozen=True, slots=True)
class GetChannelTargets(Asks[dict[str, str]]):
    pass


ChannelMsg = SetChannelTarget | GetChannelTargets


class ChannelTargets(Actor[ChannelMsg]):
    def __init__(self, store: Store) -> None:
        self._store = store
        self._targets: dict[str, str] = {}

    async def on_start(self) -> None:
        row = await self._store.fetchone("SELECT value FROM meta WHERE key = ?", (META_KEY,))
        self._targets = dict(from_json(row["value"])) if row else {}

    async def handle(self, msg: ChannelMsg) -> dict[str, str]:
        match msg:
            case SetChannelTarget(channel, version):
                updated = {**self._targets, channel: version}
                await self._store.execute(
                    "INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
                    "updated_at = excluded.updated_at",
                    (META_KEY, to_json(updated), now_ms()),
                )
                self._targets = updated  # only after the write is durable
                return dict(updated)
            case GetChannelTargets():
                return dict(self._targets)


async def set_target(ref: ActorRef[ChannelMsg], channel: str, version: str) -> dict[str, str]:
    return await ref.ask(SetChannelTarget(channel, version))


async def get_targets(ref: ActorRef[ChannelMsg]) -> dict[str, str]:
    return await ref.ask(GetChannelTargets())
