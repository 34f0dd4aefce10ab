"""Artifact keys: slash-delimited, relative, bounded; checked before anything touches a store.

A key names one stored object (``job_01.../out/model.pt``); a prefix names everything under
it (``job_01...``). Both are refused (``BadKey``, a 400 at the HTTP edge) when they could
escape the store or confuse a filesystem or an object store:

- empty, or absolute (a leading ``/``), or with an empty segment (``a//b``);
- a ``.`` or ``..`` segment;
- a NUL, a backslash, or any other control character;
- longer than :data:`MAX_KEY_BYTES` UTF-8 bytes, a segment longer than
  :data:`MAX_SEGMENT_BYTES`, or deeper than :data:`MAX_DEPTH` segments.
"""

from __future__ import annotations

MAX_KEY_BYTES = 1024
MAX_SEGMENT_BYTES = 255  # NAME_MAX of common filesystems
MAX_DEPTH = 64


class BadKey(ValueError):
    """The key (or prefix) cannot be used; ``str(exc)`` says why, for the 400 detail."""


def _check(key: str, what: str) -> list[str]:
    if not key:
        raise BadKey(f"{what} is empty")
    if len(key.encode("utf-8", errors="surrogatepass")) > MAX_KEY_BYTES:
        raise BadKey(f"{what} is longer than {MAX_KEY_BYTES} bytes")
    if key.startswith("/"):
        raise BadKey(f"{what} must be relative (no leading '/')")
    if "\\" in key:
        raise BadKey(f"{what} must not contain a backslash")
    for char in key:
        code = ord(char)
        if code < 0x20 or code == 0x7F:
            name = "a NUL byte" if code == 0 else f"control character {code:#04x}"
            raise BadKey(f"{what} must not contain {name}")
        if 0xD800 <= code <= 0xDFFF:
            raise BadKey(f"{what} is not valid UTF-8")
    segments = key.split("/")
    if len(segments) > MAX_DEPTH:
        raise BadKey(f"{what} has more than {MAX_DEPTH} segments")
    for segment in segments:
        if segment == "":
            raise BadKey(f"{what} must not contain an empty segment ('//')")
        if segment in (".", ".."):
            raise BadKey(f"{what} must not contain a {segment!r} segment")
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise BadKey(f"{what} has a segment longer than {MAX_SEGMENT_BYTES} bytes")
    return segments


def check_key(key: str) -> str:
    """``key`` if it can name an object; raise :class:`BadKey` otherwise."""
    if key.endswith("/"):
        raise BadKey("artifact key must not end with '/'")
    _check(key, "artifact key")
    return key


def check_prefix(prefix: str) -> str:
    """``prefix`` without a trailing ``/`` if it can name a folder; :class:`BadKey` otherwise."""
    trimmed = prefix[:-1] if prefix.endswith("/") else prefix
    _check(trimmed, "artifact prefix")
    return trimmed
