"""The root of the actor tree: the supervisor every long-lived actor hangs under.

    root (one-for-one, 5 restarts / 10 s)
    └── channels        ChannelTargets: operator release-channel map

Later actors (placement, node and job registries, webhooks, ...) join as children here.
If the root gives up (restart intensity exceeded) the error reaches the app's nursery and
the server stops: the process supervisor (systemd, k8s) restarts it, and every actor
rebuilds its state from the store.
"""

from __future__ import annotations

from typing import Any, cast

import trio

from runplane.actors.channels import ChannelMsg, ChannelTargets
from runplane.persistence import Store
from runplane.runtime import ActorRef, ChildSpec, Restart, Supervisor
from runplane.settings import Settings


class Root:
    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store
        self.supervisor = Supervisor(
            [
                ChildSpec(
                    "channels", lambda: ChannelTargets(store), restart=Restart.PERMANENT
                ),
            ],
            intensity=5,
            period=10.0,
            name="root",
        )

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        await self.supervisor.run(task_status=task_status)

    async def stop(self) -> None:
        await self.supervisor.stop()

    @property
    def channels(self) -> ActorRef[ChannelMsg]:
        return cast(ActorRef[ChannelMsg], self.supervisor.child("channels"))
