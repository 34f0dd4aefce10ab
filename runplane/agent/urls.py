"""The forms of the server's URL an agent is given (``--server``): its http(s) origin
(artifacts, mounts) and its agent endpoint (the WebSocket)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

CONNECT_PATH = "/v1/nodes/connect"


def http_origin(server_url: str) -> str:
    """The server's http(s) origin (with its path prefix) from what the agent was given."""
    parts = urlsplit(server_url.strip())
    scheme = parts.scheme.lower()
    scheme = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    path = parts.path.rstrip("/").removesuffix(CONNECT_PATH)
    return urlunsplit((scheme, parts.netloc, path, "", ""))


def connect_url(server_url: str) -> str:
    """The agent endpoint for a server URL: ``http://h:p/x`` -> ``ws://h:p/x/v1/nodes/connect``.

    ``https`` becomes ``wss``; ``ws``/``wss`` URLs are taken as they are (the path is added
    unless it is already there). Query and fragment are dropped.
    """
    parts = urlsplit(server_url.strip())
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme.lower())
    if scheme is None or not parts.hostname:
        raise ValueError(
            f"server URL must look like http://host:port or https://host, got {server_url!r}"
        )
    path = parts.path.rstrip("/")
    if not path.endswith(CONNECT_PATH):
        path += CONNECT_PATH
    return urlunsplit((scheme, parts.netloc, path, "", ""))
