"""The one-shot reply slot a request carries (OTP's ``From`` in a call)."""

from __future__ import annotations

from typing import Any

import trio


class Reply:
    """Answered at most once, awaited by one asker.

    Answering after the asker gave up (timeout, cancellation) is harmless: the
    answer is dropped and :meth:`send` / :meth:`fail` return ``False``.
    """

    __slots__ = ("_abandoned", "_done", "_error", "_event", "_value")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._done = False
        self._abandoned = False
        self._value: Any = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        """An answer (value or error) was given."""
        return self._done

    def send(self, value: Any) -> bool:
        """Answer with ``value``. ``False`` if already answered or abandoned."""
        if self._done or self._abandoned:
            return False
        self._done = True
        self._value = value
        self._event.set()
        return True

    def fail(self, error: BaseException) -> bool:
        """Answer with an error the asker will raise. ``False`` if too late."""
        if self._done or self._abandoned:
            return False
        self._done = True
        self._error = error
        self._event.set()
        return True

    def abandon(self) -> None:
        """The asker gives up; later answers are dropped. No-op once answered."""
        if not self._done:
            self._abandoned = True

    def result(self) -> Any:
        """The answer: the value, or the error raised. Only once :attr:`done`."""
        if not self._done:
            raise RuntimeError("no answer yet")
        if self._error is not None:
            raise self._error
        return self._value

    async def wait(self) -> Any:
        """Wait for the answer: return the value or raise the error."""
        await self._event.wait()
        return self.result()
