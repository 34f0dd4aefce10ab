"""The served app with settings of the test's choosing (registries on loopback)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
from quart_trio import QuartTrio

from runplane.http.app import create_app
from runplane.settings import load_settings
from tests.auth.support import ADMIN

Serve = Callable[..., AbstractAsyncContextManager[QuartTrio]]


@pytest.fixture
def serve(tmp_path: Path) -> Serve:
    """``async with serve(insecure_registries=...) as app``: the app with those settings."""

    @asynccontextmanager
    async def served(**env: str) -> AsyncIterator[QuartTrio]:
        base = {
            "RUNPLANE_DATA_DIR": str(tmp_path / "data"),
            "RUNPLANE_LOCAL_AGENT": "0",
            "RUNPLANE_ADMIN_TOKEN": ADMIN,
        }
        base.update({f"RUNPLANE_{k.upper()}": v for k, v in env.items()})
        application = create_app(load_settings(base))
        async with application.test_app():
            yield application

    return served
