"""Where the client finds its server and token: flags, then ``RUNPLANE_URL`` and
``RUNPLANE_TOKEN``, then the config file (``$RUNPLANE_CONFIG``, else
``~/.config/runplane/config.toml``: ``url = "..."`` and ``token = "..."``), then
``http://127.0.0.1:8080`` and no token (docs/cli.md)."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8080"


def config_path() -> Path:
    explicit = os.environ.get("RUNPLANE_CONFIG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "runplane" / "config.toml"


@dataclass(frozen=True, slots=True)
class ClientConfig:
    url: str = DEFAULT_URL
    token: str | None = None

    @classmethod
    def load(cls, url: str | None = None, token: str | None = None) -> ClientConfig:
        """The settings: arguments win over the environment, which wins over the file."""
        stored: dict[str, object] = {}
        path = config_path()
        if path.is_file():
            with path.open("rb") as fh:
                stored = tomllib.load(fh)
        found_url = url or os.environ.get("RUNPLANE_URL") or stored.get("url") or DEFAULT_URL
        found_token = token or os.environ.get("RUNPLANE_TOKEN") or stored.get("token") or None
        return cls(url=str(found_url).rstrip("/"), token=str(found_token) if found_token else None)
