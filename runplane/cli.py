"""The ``runplane`` command line: ``runplane serve``, ``runplane agent``, ``runplane --version``."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, cast

import trio

from runplane import __version__, logs
from runplane.settings import Settings, SettingsError, ensure_secret_key, load_settings

log = logging.getLogger("runplane.cli")

#: Seconds in-flight requests get to finish after SIGINT/SIGTERM before they are cut.
GRACEFUL_TIMEOUT = 10.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="runplane",
        description="runplane job-orchestration control plane",
        epilog="client commands (on a running server; `runplane submit --help` etc., "
        "docs/cli.md): " + ", ".join(sorted(USER_VERBS)),
    )
    parser.add_argument("--version", action="version", version=f"runplane {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser("serve", help="serve the API (settings come from RUNPLANE_* env)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument(
        "--port", type=int, default=8080, help="port to bind (default 8080; 0 picks a free one)"
    )
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])
    agent = sub.add_parser("agent", help="run a node agent that takes jobs from a runplane server")
    agent.add_argument(
        "--server",
        required=True,
        metavar="URL[,URL...]",
        help="server URL, e.g. http://127.0.0.1:8080; with HA replicas, a comma list of them "
        "(tried in turn after a failed or lost connection)",
    )
    agent.add_argument(
        "--join-token",
        metavar="TOKEN",
        help="join token (rpj_...) to enroll with; not needed once enrolled",
    )
    agent.add_argument(
        "--data-dir",
        type=Path,
        default=Path("./.runplane-agent"),
        help="credential, job workdirs and caches (default ./.runplane-agent)",
    )
    agent.add_argument("--name", help="node name (default: the hostname)")
    agent.add_argument(
        "--max-concurrency",
        type=_positive_int,
        metavar="N",
        help="jobs run at once (default: the number of CPU cores)",
    )
    agent.add_argument(
        "--capability",
        action="append",
        default=[],
        metavar="NAME",
        help="add a capability to the detected ones (repeatable), e.g. simulator",
    )
    agent.add_argument(
        "--drain-timeout",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, how long running jobs may finish before they are stopped "
        "and handed back to the server to requeue (default 60; 0: at once)",
    )
    agent.add_argument(
        "--host-path",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="a node directory whose files jobs may copy as file/dir/git inputs (repeatable; "
        "none by default; never the agent's data dir or job directories)",
    )
    agent.add_argument(
        "--run-as",
        metavar="USER",
        help="run every job as this one existing user (a root agent only; root: jobs run as "
        "root and can read the credential); by default a root agent gives each job a uid "
        "of its own (--uid-range)",
    )
    agent.add_argument(
        "--uid-range",
        metavar="FIRST-LAST",
        help="the uids a root agent gives its jobs, one per running job (default: "
        "1950000000-1950065535; agents of one host may share it)",
    )
    agent.add_argument(
        "--shared-uid-ok",
        action="store_true",
        help="where jobs share one uid (a non-root agent, --run-as), still let jobs of "
        "several orgs run here at once (by default placement runs one org at a time)",
    )
    agent.add_argument(
        "--work-dir",
        type=Path,
        metavar="DIR",
        help="where job working directories live (default: <data dir>/jobs, or "
        "/var/lib/runplane/jobs-<hash of the data dir> when jobs run as another user)",
    )
    agent.add_argument(
        "--executor",
        choices=["process", "sandbox"],
        default="process",
        help="how jobs run: process (a process group, the host as it is) or sandbox "
        "(bubblewrap: the host read-only, a private /tmp, no view of the agent's data or "
        "other jobs, its own pid namespace); see docs/executor.md",
    )
    agent.add_argument(
        "--best-effort-limits",
        action="store_true",
        help="also run jobs whose limits this node cannot enforce (each such job's log says "
        "which limit is not enforced); by default placement sends them elsewhere",
    )
    agent.add_argument(
        "--auto-update",
        action="store_true",
        help="apply the release channel's target version by itself (install, let running "
        "jobs finish, restart); without it only an operator's POST /v1/nodes/{id}/update "
        "does; install command: RUNPLANE_AGENT_UPDATE_CMD / RUNPLANE_AGENT_UPDATE_PIP_ARGS",
    )
    agent.add_argument(
        "--update-drain-timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="after a self-update installed, how long running jobs may finish before they "
        "are handed back to the server to requeue (default: wait for them however long)",
    )
    agent.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])
    return parser


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


async def _local_agent_credential(app: Any, data_dir: Path) -> None:
    """With auth required no agent may enroll without a join token; the in-process agent is
    the server's own, so the server enrolls it directly (once) and hands it the credential."""
    from runplane.agent import credentials
    from runplane.nodes import enrollment

    if credentials.load_credential(data_dir) is not None:
        return
    node = await enrollment.open_enroll(app.extensions["runplane"].store)
    credentials.save_credential(data_dir, node.credential_secret)


async def serve(settings: Settings, host: str, port: int) -> None:
    """Serve until SIGINT/SIGTERM, then drain in-flight requests and flush the store.

    With ``RUNPLANE_LOCAL_AGENT`` on, one node agent runs in this process, connected to the
    server over loopback like any other; it is stopped first on shutdown, by a drain with
    no wait: its running jobs are stopped and handed back (requeued, not cancelled), so
    the next start runs them again."""
    from hypercorn.trio import serve as hypercorn_serve

    from runplane import fdlimit
    from runplane.agent.client import Agent
    from runplane.http.app import create_app

    fdlimit.raise_open_file_limit(log)  # soft to hard: every connection holds one (logged)
    if settings.ha:
        await serve_replica(settings, host, port)
        return
    config = _config(host, port)
    app = create_app(settings)
    stop = trio.Event()  # a signal arrived
    server_stop = trio.Event()  # the local agent is down: stop serving
    # The receiver is installed before the socket is bound, so no signal finds us unprepared.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_signals, signals, stop)
            binds = await nursery.start(
                partial(hypercorn_serve, app, config, shutdown_trigger=server_stop.wait)
            )
            log.info("listening", extra={"urls": binds, "version": __version__})
            agent: Agent | None = None
            if settings.local_agent:
                agent_dir = settings.data_dir / "local-agent"
                if settings.auth == "required":
                    await _local_agent_credential(app, agent_dir)
                # the built-in agent runs what it cannot enforce, saying so in the job's
                # log (a laptop without cgroups still runs jobs with limits)
                agent = Agent(
                    _loopback(binds[0]),
                    agent_dir,
                    name="local",
                    best_effort_limits=True,
                    executor=settings.local_agent_executor,
                    # it is the server's process: it updates with the server, not alone
                    self_update=False,
                )
                agent_done = trio.Event()

                async def run_agent(agent: Agent = agent, done: trio.Event = agent_done) -> None:
                    try:
                        await agent.run()
                    finally:
                        done.set()

                nursery.start_soon(run_agent)
            await stop.wait()
            if agent is not None:
                agent.drain(0)
                with trio.move_on_after(GRACEFUL_TIMEOUT):
                    await agent_done.wait()
            server_stop.set()
    log.info("stopped")


def _config(host: str, port: int) -> Any:
    from runplane.http.serving import Config  # hypercorn's Config + serving fixes

    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.graceful_timeout = GRACEFUL_TIMEOUT
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    return config


async def serve_replica(settings: Settings, host: str, port: int) -> None:
    """``RUNPLANE_HA=1``: serve as one replica (runplane/http/replica.py). Ends at
    SIGINT/SIGTERM (a leader gives its lease back), or at once with exit code 3 when this
    replica loses the lease: nothing of an old leader runs on (its supervisor restarts it,
    as a follower)."""
    from hypercorn.trio import serve as hypercorn_serve

    from runplane.http.replica import EXIT_LOST_LEASE, Replica

    replica = Replica(settings)
    await replica.open()
    stop = trio.Event()
    server_stop = trio.Event()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_signals, signals, stop)
            binds = await nursery.start(
                partial(
                    hypercorn_serve,
                    cast(Any, replica.gate),  # an ASGI 3 app: hypercorn's types name its own
                    _config(host, port),
                    shutdown_trigger=server_stop.wait,
                )
            )
            log.info("listening", extra={"urls": binds, "version": __version__})
            await nursery.start(replica.run, binds[0])
            async with trio.open_nursery() as either:
                for event in (stop, replica.lost):
                    either.start_soon(_set_then_cancel, event, either.cancel_scope)
            if replica.lost.is_set():
                logging.shutdown()  # flush the log, then end: no shutdown path runs
                os._exit(EXIT_LOST_LEASE)
            await replica.stop()
            server_stop.set()
            nursery.cancel_scope.cancel()
    log.info("stopped")


async def _watch_signals(signals: AsyncIterator[int], stop: trio.Event) -> None:
    """Set ``stop`` at the first SIGINT or SIGTERM."""
    async for signum in signals:
        log.info("shutdown requested", extra={"signal": signal.Signals(signum).name})
        stop.set()
        return


async def _set_then_cancel(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def _loopback(url: str) -> str:
    """Where the in-process agent reaches the server: a wildcard bind means loopback."""
    return url.replace("://0.0.0.0:", "://127.0.0.1:").replace("://[::]:", "://[::1]:")


def _leaves(group: BaseExceptionGroup[OSError]) -> list[OSError]:
    out: list[OSError] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


#: The user verbs (runplane/client/cli.py, docs/cli.md): a client of a running server.
USER_VERBS = frozenset(
    {
        "submit",
        "ls",
        "get",
        "logs",
        "cancel",
        "rerun",
        "stacks",
        "nodes",
        "pipeline",
        "session",
        "whoami",
    }
)


def _verb(args: Sequence[str]) -> str | None:
    """The first word that is not an option (nor the value of ``--url``/``--token``)."""
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--url", "--token"):
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if _verb(given) in USER_VERBS:
        from runplane.client.cli import main as client_main

        return client_main(given)
    args = _parser().parse_args(argv)
    if args.command is None:
        _parser().print_help()
        return 2
    logs.configure(args.log_level)
    if args.command == "agent":
        # An agent reads no server settings: only its own flags.
        from runplane.agent.main import main as agent_main

        return agent_main(
            args.server,
            data_dir=args.data_dir,
            join_token=args.join_token,
            name=args.name,
            max_concurrency=args.max_concurrency,
            capabilities=args.capability,
            drain_timeout=args.drain_timeout,
            host_paths=args.host_path,
            run_as=args.run_as,
            uid_range=args.uid_range,
            shared_uid_ok=args.shared_uid_ok,
            work_dir=args.work_dir,
            executor=args.executor,
            best_effort_limits=args.best_effort_limits,
            auto_update=args.auto_update,
            update_drain_timeout=args.update_drain_timeout,
        )
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
