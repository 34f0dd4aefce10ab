"""Hello-world servers that set the serving ceilings runplane's figures are held against.

    python -m bench.hello h11      # minimal trio + h11 server: the floor of any trio stack
    python -m bench.hello asgi     # a bare ASGI callable under hypercorn's trio worker
    python -m bench.hello quart    # a Quart-trio app with one route under hypercorn (trio)
    python -m bench.hello asgi-stock|quart-stock   # the same without runplane's serving fixes

Each binds 127.0.0.1 on a free port, prints ``{"port": N, "pid": P}`` on stdout, answers
``GET /`` (any path) with ``200 ok`` until SIGINT/SIGTERM. The hypercorn ones are built
like ``runplane serve`` builds its server (same Config settings, including
``runplane.http.serving`` when present), so the difference to runplane's own hello-world
route (``/healthz``) is runplane's app and middleware, not the server.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from functools import partial
from typing import Any

import h11
import trio

BODY = b"ok"


# -- minimal trio + h11 ---------------------------------------------------------------------


async def _h11_conn(stream: trio.SocketStream) -> None:
    conn = h11.Connection(h11.SERVER)
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(BODY)).encode()),
    ]
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                conn.receive_data(data)
                if not data and conn.their_state is not h11.DONE:
                    return
                continue
            if isinstance(event, h11.Request):
                continue
            if isinstance(event, h11.EndOfMessage):
                out = conn.send(h11.Response(status_code=200, headers=headers))
                out += conn.send(h11.Data(data=BODY))
                out += conn.send(h11.EndOfMessage())
                await stream.send_all(out)
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
                continue
            if isinstance(event, h11.ConnectionClosed):
                return
    except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
        return
    finally:
        await trio.aclose_forcefully(stream)


async def serve_h11() -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, _h11_conn, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        _ready(port)
        await _until_signal()
        nursery.cancel_scope.cancel()


# -- hypercorn (trio worker) --------------------------------------------------------------


async def asgi_hello(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(BODY)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": BODY})


def quart_hello() -> Any:
    from quart import Response
    from quart_trio import QuartTrio

    app = QuartTrio("hello")

    @app.route("/", defaults={"path": ""})
    @app.route("/<path:path>")
    async def hello(path: str) -> Response:
        return Response(BODY, content_type="text/plain; charset=utf-8")

    return app


def hypercorn_config(stock: bool = False) -> Any:
    """The Config ``runplane serve`` builds (minus the bind); ``stock``: plain hypercorn."""
    if stock:
        from hypercorn.config import Config
    else:
        try:  # runplane's serving fixes, when this tree has them
            from runplane.http.serving import Config
        except ImportError:
            from hypercorn.config import Config
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.graceful_timeout = 10.0
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    return config


async def serve_hypercorn(app: Any, stock: bool = False) -> None:
    from hypercorn.trio import serve

    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            partial(serve, app, hypercorn_config(stock), shutdown_trigger=stop.wait)
        )
        _ready(int(binds[0].rsplit(":", 1)[1]))
        await _until_signal()
        stop.set()


# -- plumbing -----------------------------------------------------------------------------


def _ready(port: int) -> None:
    import os

    sys.stdout.write(json.dumps({"port": port, "pid": os.getpid()}) + "\n")
    sys.stdout.flush()


async def _until_signal() -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["h11", "asgi", "asgi-stock", "quart", "quart-stock"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.kind == "h11":
        trio.run(serve_h11)
    elif args.kind.startswith("asgi"):
        trio.run(serve_hypercorn, asgi_hello, args.kind.endswith("-stock"))
    else:
        trio.run(serve_hypercorn, quart_hello(), args.kind.endswith("-stock"))


if __name__ == "__main__":
    main()
