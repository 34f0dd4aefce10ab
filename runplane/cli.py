"""The ``runplane`` command line: ``runplane serve`` and ``runplane --version``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from functools import partial

import trio

from runplane import __version__, logs
from runplane.settings import Settings, SettingsError, ensure_secret_key, load_settings

log = logging.getLogger("runplane.cli")

#: Seconds in-flight requests get to finish after SIGINT/SIGTERM before they are cut.
GRACEFUL_TIMEOUT = 10.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="runplane", description="runplane job-orchestration control plane"
    )
    parser.add_argument("--version", action="version", version=f"runplane {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser("serve", help="serve the API (settings come from RUNPLANE_* env)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument(
        "--port", type=int, default=8080, help="port to bind (default 8080; 0 picks a free one)"
    )
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])
    return parser


async def serve(settings: Settings, host: str, port: int) -> None:
    """Serve until SIGINT/SIGTERM, then drain in-flight requests and flush the store."""
    from hypercorn.config import Config
    from hypercorn.trio import serve as hypercorn_serve

    from runplane.http.app import create_app

    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.graceful_timeout = GRACEFUL_TIMEOUT
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    app = create_app(settings)
    stop = trio.Event()
    # The receiver is installed before the socket is bound, so no signal finds us unprepared.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

        async def watch_signals() -> None:
            async for signum in signals:
                log.info("shutdown requested", extra={"signal": signal.Signals(signum).name})
                stop.set()
                return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_signals)
            binds = await nursery.start(
                partial(hypercorn_serve, app, config, shutdown_trigger=stop.wait)
            )
            log.info("listening", extra={"urls": binds, "version": __version__})
            await stop.wait()
    log.info("stopped")


def _leaves(group: BaseExceptionGroup[OSError]) -> list[OSError]:
    out: list[OSError] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command is None:
        _parser().print_help()
        return 2
    logs.configure(args.log_level)
    try:
        settings = ensure_secret_key(load_settings())
    except SettingsError as exc:
        print(f"runplane: {exc}", file=sys.stderr)
        return 2
    if args.command == "serve":
        failed: list[OSError] = []
        try:
            trio.run(serve, settings, args.host, args.port)
        except* OSError as group:
            failed.extend(_leaves(group))
        if failed:
            print(
                f"runplane: cannot serve on {args.host}:{args.port}: "
                f"{failed[0].strerror or failed[0]}; free the port or pass --port",
                file=sys.stderr,
            )
            return 1
        return 0
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    raise SystemExit(main())
