"""One wording for a refused name: what is accepted, and the close match when there is one.

``accepted_phrase(["cpu_cores", "timeout_sec"], "timeout")`` is
``"accepted: cpu_cores, timeout_sec (did you mean 'timeout_sec'?)"``. Request bodies
(unknown fields), query strings (unknown parameters), stack config (unknown keys) and stack
names all say it this way. Pure: no I/O, no state.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["CUTOFF", "accepted_phrase", "closest", "suggestion"]

#: ``difflib``'s similarity a choice needs to be suggested (its default).
CUTOFF = 0.6


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice closest to ``word`` when one is close enough, else None."""
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=CUTOFF)
    return matches[0] if matches else None


def suggestion(word: str, choices: Iterable[str]) -> str:
    """``"did you mean 'x'?"`` for the close choice ``x``, else ``""``."""
    match = closest(word, choices)
    return f"did you mean {match!r}?" if match is not None else ""


def accepted_phrase(choices: Iterable[str], word: str | None = None) -> str:
    """``"accepted: a, b, c"``, followed by ``" (did you mean 'b'?)"`` when ``word`` is
    close to one of them. ``choices`` keep their order."""
    names = list(choices)
    text = f"accepted: {', '.join(names)}" if names else "accepted: none"
    hint = suggestion(word, names) if word is not None else ""
    return f"{text} ({hint})" if hint else text
