"""A webhook receiver for tests: a real HTTP/1.1 server (trio + h11) on a loopback port
that records what it is sent and answers from a script (status codes, optionally with
headers such as Retry-After; 200 once the script is used up)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import h11
import trio

from runplane.webhooks import signing
from tests.h11_server import answer, read_request


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]  # lowercase names
    body: bytes
    at: float  # trio time

    def verified(self, secret: str, now: float) -> bool:
        """Both signatures check out (the X-Runplane one and the Standard Webhooks one)."""
        standard = signing.standard_signature(
            secret,
            self.headers["webhook-id"],
            int(self.headers["webhook-timestamp"]),
            self.body,
        )
        return signing.verify(secret, self.headers, self.body, now) and (
            self.headers["webhook-signature"] == standard
        )


#: A status, a status with extra headers, or "hang" (read the request, never answer).
Answer = int | tuple[int, list[tuple[str, str]]] | str


@dataclass
class Receiver:
    script: deque[Answer] = field(default_factory=deque)
    received: list[Received] = field(default_factory=list)
    port: int = 0
    _changed: trio.Event = field(default_factory=trio.Event)

    @classmethod
    async def start(cls, nursery: trio.Nursery, script: Iterable[Answer] = ()) -> Receiver:
        receiver = cls(script=deque(script))
        listeners = await nursery.start(trio.serve_tcp, receiver._handle, 0)
        receiver.port = listeners[0].socket.getsockname()[1]
        return receiver

    def url(self, host: str = "127.0.0.1", path: str = "/hook") -> str:
        return f"http://{host}:{self.port}{path}"

    async def wait_for(self, count: int, *, real_sec: float = 30.0) -> list[Received]:
        """Until ``count`` requests came, at most ``real_sec`` of real time (a test under a
        mock clock has no other timeout)."""
        async with trio.open_nursery() as nursery:

            async def watchdog() -> None:
                await trio.to_thread.run_sync(time.sleep, real_sec, abandon_on_cancel=True)
                raise AssertionError(f"{count} requests did not come within {real_sec} s")

            nursery.start_soon(watchdog)
            while len(self.received) < count:
                await self._changed.wait()
            nursery.cancel_scope.cancel()
        return self.received

    async def _handle(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        async with stream:
            request = await read_request(stream, conn)
            if request is None:
                return
            answer_of = self.script.popleft() if self.script else 200
            self.received.append(
                Received(request.target, request.headers, request.body, trio.current_time())
            )
            self._changed.set()
            self._changed = trio.Event()
            if answer_of == "hang":
                await trio.sleep_forever()
            assert not isinstance(answer_of, str)
            status, extra = (answer_of, []) if isinstance(answer_of, int) else answer_of
            await answer(stream, conn, status, b"ok", extra)
