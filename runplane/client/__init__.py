"""The runplane client: :class:`Client` (Python, sync, httpx) and the user verbs of the
``runplane`` command (docs/cli.md). It imports nothing of the server, so it runs on a
laptop with only its own dependencies."""

from .api import ApiError, Client

__all__ = ["ApiError", "Client"]
