"""What routes can reach: settings, the store and the actor tree's client handles."""

from __future__ import annotations

from dataclasses import dataclass

from quart import current_app

from runplane.artifacts import ArtifactStore
from runplane.persistence import Store
from runplane.settings import Settings
from runplane.stacks import Catalog
from runplane.system import Root


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    store: Store
    root: Root
    catalog: Catalog
    artifacts: ArtifactStore | None = None


def services() -> Services:
    """The running app's services (set by the lifespan before the first request)."""
    svc: Services = current_app.extensions["runplane"]
    return svc
