"""Fixtures for the auth tests: the e2e agent-process fixture, shared."""

from tests.e2e.conftest import start_agent  # noqa: F401  (a fixture, used by name)
