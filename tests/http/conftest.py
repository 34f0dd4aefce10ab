"""Fixtures for in-process app tests: a served app (lifespan run) and its test client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from quart_trio import QuartTrio

from runplane.http.app import create_app
from runplane.settings import Settings, load_settings

ADMIN = "admin-token-for-tests-0123456789"


@pytest.fixture
def make_settings(tmp_path: Path) -> Callable[..., Settings]:
    def make(**env: str) -> Settings:
        base = {
            "RUNPLANE_DATA_DIR": str(tmp_path / "data"),
            "RUNPLANE_LOCAL_AGENT": "0",
            "RUNPLANE_ADMIN_TOKEN": ADMIN,
        }
        base.update({f"RUNPLANE_{k.upper()}": v for k, v in env.items()})
        return load_settings(base)

    return make


@pytest.fixture
async def app(make_settings: Callable[..., Settings]) -> AsyncIterator[QuartTrio]:
    application = create_app(make_settings())
    async with application.test_app():
        yield application


@pytest.fixture
def client(app: QuartTrio) -> Any:
    return app.test_client()


@asynccontextmanager
async def _served(settings: Settings) -> AsyncIterator[QuartTrio]:
    application = create_app(settings)
    async with application.test_app():
        yield application


def _on(durable_store_url: str | None, **env: str) -> dict[str, str]:
    return {**env, "database_url": durable_store_url} if durable_store_url is not None else env


@pytest.fixture
async def durable_app(
    make_settings: Callable[..., Settings], durable_store_url: str | None
) -> AsyncIterator[QuartTrio]:
    """The open app on each durable backend (SQLite, and PostgreSQL when one is
    configured)."""
    async with _served(make_settings(**_on(durable_store_url))) as application:
        yield application


@pytest.fixture
async def required_app(
    make_settings: Callable[..., Settings], durable_store_url: str | None
) -> AsyncIterator[QuartTrio]:
    """The app with ``RUNPLANE_AUTH=required`` on each durable backend (SQLite, and
    PostgreSQL when one is configured)."""
    async with _served(make_settings(**_on(durable_store_url, auth="required"))) as application:
        yield application
