"""The ``runplane`` command, one click tree: ``runplane serve`` and ``runplane agent`` (here)
beside the user verbs of the client (runplane/client/cli.py, docs/cli.md), ``--version``."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import click
import trio

from runplane import __version__, logs
from runplane.agent.errors import AgentError
from runplane.client.cli import cli, run
from runplane.datadir import DataDirInUse, lock_data_dir
from runplane.persistence import NewerStoreError, open_store
from runplane.settings import Settings, SettingsError, ensure_secret_key, load_settings

log = logging.getLogger("runplane.cli")

#: Seconds in-flight requests get to finish after SIGINT/SIGTERM before they are cut.
GRACEFUL_TIMEOUT = 10.0
LOG_LEVELS = click.Choice(["DEBUG", "INFO", "WARNING"])
E = TypeVar("E", bound=BaseException)
#: the data dir lock's fd: open for the process's life (the lock ends with it)
_held: list[int] = []


@click.command(short_help="Serve the API (settings: RUNPLANE_* env).")
@click.option("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
@click.option(
    "--port", type=int, default=8080, help="port to bind (default 8080; 0 picks a free one)"
)
@click.option("--log-level", type=LOG_LEVELS, default="INFO", help="(default INFO)")
def serve_command(host: str, port: int, log_level: str) -> int:
    """Serve the API (settings come from RUNPLANE_* env; docs/operations.md).

    Exits 0 after SIGINT/SIGTERM, 1 when it cannot bind or its store is newer than this
    version, 2 for a bad setting, 3 when an HA replica lost its lease."""
    logs.configure(log_level)
    try:
        settings = load_settings()
        if not settings.ha:  # replicas share theirs (docs/operations.md)
            _held.append(lock_data_dir(settings.data_dir))
        settings = ensure_secret_key(settings)
    except SettingsError as exc:
        print(f"runplane: {exc}", file=sys.stderr)
        return 2
    except DataDirInUse as exc:
        print(f"runplane: {exc}", file=sys.stderr)
        return 1
    failed: list[OSError] = []
    agent_failed: list[AgentError] = []
    newer: list[NewerStoreError] = []
    try:
        trio.run(serve, settings, host, port)
    except* NewerStoreError as group:  # before the store's first migration: nothing changed
        newer.extend(_leaves(group))
    except* OSError as group:
        failed.extend(_leaves(group))
    except* AgentError as group:  # the local agent cannot go on (its data dir is busy)
        agent_failed.extend(_leaves(group))
    if newer:
        print(newer_store_line(newer[0]), file=sys.stderr)
        return 1
    if agent_failed:
        print(f"runplane: local agent: {agent_failed[0]}", file=sys.stderr)
        return 1
    if failed:
        print(
            f"runplane: cannot serve on {host}:{port}: "
            f"{failed[0].strerror or failed[0]}; free the port or pass --port",
            file=sys.stderr,
        )
        return 1
    return 0


def newer_store_line(exc: NewerStoreError) -> str:
    """What an older runplane says of a store a newer one migrated (docs/operations.md
    "Upgrading"), in one line."""
    return (
        f"runplane {__version__} (schema {exc.known:04d}) cannot open this store: it is at "
        f"schema {exc.store:04d}, written by a newer runplane; upgrade runplane or restore "
        "a backup taken before the upgrade"
    )


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
    from runplane import fdlimit
    from runplane.http.app import create_app

    if settings.ha:
        fdlimit.raise_open_file_limit(log)  # soft to hard: every connection holds one
        await serve_replica(settings, host, port)
        return
    # opened here, not in the app's lifespan: a store this version cannot open (a newer
    # one's) ends `serve` with its one line (serve_command), before anything else is said
    store = open_store(settings.database_url, settings.data_dir)
    await store.open()
    fdlimit.raise_open_file_limit(log)  # soft to hard: every connection holds one (logged)
    try:
        await _serve_single(create_app(settings, store=store), settings, host, port)
    finally:
        await store.close()
    log.info("stopped")


async def _serve_single(app: Any, settings: Settings, host: str, port: int) -> None:
    """Serve ``app`` (one server, no HA) until SIGINT/SIGTERM."""
    from hypercorn.trio import serve as hypercorn_serve

    config = _config(host, port)
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
            stop_agent = None
            if settings.local_agent:
                stop_agent = await _start_local_agent(nursery, app, settings, binds[0])
            await stop.wait()
            if stop_agent is not None:
                await stop_agent()
            server_stop.set()


async def _start_local_agent(
    nursery: trio.Nursery, app: Any, settings: Settings, url: str
) -> Callable[[], Awaitable[None]]:
    """Start the in-process agent in ``nursery``; what it returns stops it: a drain with no
    wait, then up to GRACEFUL_TIMEOUT for it to hand its jobs back."""
    from runplane.agent.client import Agent

    agent_dir = settings.data_dir / "local-agent"
    if settings.auth == "required":
        await _local_agent_credential(app, agent_dir)
    # the built-in agent runs what it cannot enforce, saying so in the job's
    # log (a laptop without cgroups still runs jobs with limits)
    agent = Agent(
        _loopback(url),
        agent_dir,
        name="local",
        best_effort_limits=True,
        executor=settings.local_agent_executor,
        max_concurrency=settings.local_agent_max_concurrency or None,
        cpu_cores=settings.local_agent_cpu_cores or None,
        # it is the server's process: it updates with the server, not alone
        self_update=False,
    )
    done = trio.Event()

    async def run_agent() -> None:
        try:
            await agent.run()
        finally:
            done.set()

    async def stop_agent() -> None:
        agent.drain(0)
        with trio.move_on_after(GRACEFUL_TIMEOUT):
            await done.wait()

    nursery.start_soon(run_agent)
    return stop_agent


def _config(host: str, port: int) -> Any:
    from runplane.http.serving import Config  # hypercorn's Config + serving fixes

    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.graceful_timeout = GRACEFUL_TIMEOUT
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    return config


async def serve_replica(settings: Settings, host: str, port: int) -> None:
    """``RUNPLANE_HA=1``: serve as one replica (runplane/http/replica.py). A lost lease
    does not end it: the replica steps down inside the process (the old leader's actor
    tree stopped at once, no shutdown path) and campaigns again, as a follower. Ends at
    SIGINT/SIGTERM (a leader gives its lease back), or at once with exit code 3 when a
    step-down cannot finish (its supervisor restarts it, as a follower)."""
    from hypercorn.trio import serve as hypercorn_serve

    from runplane.http.replica import EXIT_STEP_DOWN_FAILED, Replica

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
                for event in (stop, replica.failed):
                    either.start_soon(_set_then_cancel, event, either.cancel_scope)
            if replica.failed.is_set():
                logging.shutdown()  # flush the log, then end: no shutdown path runs
                os._exit(EXIT_STEP_DOWN_FAILED)
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


def _leaves(group: BaseExceptionGroup[E]) -> list[E]:
    out: list[E] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def _seconds(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """An option of 0 or more seconds (a float); its errors name the option."""
    if value is None:
        return None
    hint = param.opts[0]
    try:
        seconds = float(value)
    except ValueError:
        raise click.BadParameter(
            f"not a number of seconds: {value!r}", ctx, param_hint=hint
        ) from None
    if not 0 <= seconds < float("inf"):
        raise click.BadParameter(f"must be 0 or more seconds, got {value}", ctx, param_hint=hint)
    return seconds


DIR = click.Path(path_type=Path)


@click.command(short_help="Run a node agent that takes jobs from a server.")
@click.option(
    "--server",
    required=True,
    metavar="URL[,URL...]",
    help="server URL, e.g. http://127.0.0.1:8080; with HA replicas, a comma list of them "
    "(tried in turn after a failed or lost connection)",
)
@click.option(
    "--join-token",
    metavar="TOKEN",
    help="join token (rpj_...) to enroll with; not needed once enrolled",
)
@click.option(
    "--data-dir",
    type=DIR,
    default=Path(".runplane-agent"),
    help="credential, job workdirs and caches (default ./.runplane-agent)",
)
@click.option("--name", help="node name (default: the hostname)")
@click.option(
    "--max-concurrency",
    type=click.IntRange(min=1),
    metavar="N",
    help="jobs run at once (default: the number of CPU cores)",
)
@click.option(
    "--capability",
    "capabilities",
    multiple=True,
    metavar="NAME",
    help="add a capability to the detected ones (repeatable), e.g. simulator",
)
@click.option(
    "--drain-timeout",
    callback=_seconds,
    default="60",
    metavar="SECONDS",
    help="on SIGTERM/SIGINT, how long running jobs may finish before they are stopped "
    "and handed back to the server to requeue (default 60; 0: at once)",
)
@click.option(
    "--host-path",
    "host_paths",
    multiple=True,
    type=DIR,
    metavar="DIR",
    help="a node directory whose files jobs may copy as file/dir/git inputs (repeatable; "
    "none by default; never the agent's data dir or job directories)",
)
@click.option(
    "--run-as",
    metavar="USER",
    help="run every job as this one existing user (a root agent only; root: jobs run as "
    "root and can read the credential); by default a root agent gives each job a uid "
    "of its own (--uid-range)",
)
@click.option(
    "--uid-range",
    metavar="FIRST-LAST",
    help="the uids a root agent gives its jobs, one per running job (default: "
    "1950000000-1950065535; agents of one host may share it)",
)
@click.option(
    "--shared-uid-ok",
    is_flag=True,
    help="where jobs share one uid (a non-root agent, --run-as), still let jobs of "
    "several orgs run here at once (by default placement runs one org at a time)",
)
@click.option(
    "--work-dir",
    type=DIR,
    metavar="DIR",
    help="where job working directories live (default: <data dir>/jobs, or "
    "/var/lib/runplane/jobs-<hash of the data dir> when jobs run as another user)",
)
@click.option(
    "--executor",
    type=click.Choice(["process", "sandbox", "container"]),
    default="process",
    help="how jobs run: process (a process group, the host as it is), sandbox "
    "(bubblewrap: the host read-only, a private /tmp, no view of the agent's data or "
    "other jobs, its own pid namespace) or container (jobs with an image run in it, "
    "pulled by digest into the node's image cache; others as with process); see "
    "docs/executor.md and docs/containers.md",
)
@click.option(
    "--image-cache-gb",
    type=click.FloatRange(min=0, min_open=True),
    default=20.0,
    metavar="N",
    help="with --executor container: GiB of unpacked images the node keeps in <data "
    "dir>/images (default 20); beyond it the least recently used are evicted, never "
    "one a job is using",
)
@click.option(
    "--advertise-address",
    metavar="HOST",
    help="how other nodes reach this one: a multi-node job's RUNPLANE_MASTER_ADDR when "
    "its rank 0 runs here (default: the address the server sees this agent connect "
    "from); see docs/jobs.md",
)
@click.option(
    "--best-effort-limits",
    is_flag=True,
    help="also run jobs whose limits this node cannot enforce (each such job's log says "
    "which limit is not enforced); by default placement sends them elsewhere",
)
@click.option(
    "--auto-update",
    is_flag=True,
    help="apply the release channel's target version by itself (install, let running "
    "jobs finish, restart); without it only an operator's POST /v1/nodes/{id}/update "
    "does; install command: RUNPLANE_AGENT_UPDATE_CMD / RUNPLANE_AGENT_UPDATE_PIP_ARGS",
)
@click.option(
    "--update-drain-timeout",
    callback=_seconds,
    metavar="SECONDS",
    help="after a self-update installed, how long running jobs may finish before they "
    "are handed back to the server to requeue (default: wait for them however long)",
)
@click.option("--log-level", type=LOG_LEVELS, default="INFO", help="(default INFO)")
def agent_command(log_level: str, **options: Any) -> int:
    """Run a node agent that takes jobs from a runplane server (docs/agent.md).

    Exits 0 after SIGINT/SIGTERM (its jobs drained or handed back), 1 when the server
    refused it, 2 for bad input. It reads no server settings: only its own options."""
    logs.configure(log_level)
    from runplane.agent.main import main as agent_main

    return agent_main(**options)


def _settings_for(verb: str) -> Settings | int:
    """The settings ``serve`` would read (RUNPLANE_* env), or the exit code 2."""
    try:
        return load_settings()
    except SettingsError as exc:
        print(f"runplane {verb}: {exc}", file=sys.stderr)
        return 2


@click.command(short_help="Back up the store, artifacts and secret key (while serving).")
@click.argument("dest", type=DIR)
def backup_command(dest: Path) -> int:
    """Back up what `serve` uses (RUNPLANE_DATA_DIR, RUNPLANE_DATABASE_URL) into the new or
    empty directory DEST, while the server runs (docs/operations.md "Backups"). DEST holds
    the secret key: protect it. Exits 0 when complete, 1 when it failed."""
    from runplane.backup import BackupError, backup

    settings = _settings_for("backup")
    if isinstance(settings, int):
        return settings
    try:
        backup(settings, dest)
    except (BackupError, OSError, sqlite3.Error) as exc:
        print(f"runplane backup: {exc}", file=sys.stderr)
        return 1
    return 0


@click.command(short_help="Restore a backup into an empty data dir / database.")
@click.argument("src", type=DIR)
@click.option("--force", is_flag=True, help="restore over a target that is not empty")
def restore_command(src: Path, force: bool) -> int:
    """Restore the backup SRC into what `serve` would use (RUNPLANE_DATA_DIR,
    RUNPLANE_DATABASE_URL), with no server running on it (docs/operations.md "Backups").
    Exits 0 when restored, 1 when refused or failed."""
    from runplane.backup import BackupError, restore

    settings = _settings_for("restore")
    if isinstance(settings, int):
        return settings
    try:
        restore(settings, src, force=force)
    except (BackupError, DataDirInUse, OSError, sqlite3.Error) as exc:
        print(f"runplane restore: {exc}", file=sys.stderr)
        return 1
    return 0


cli.add_command(serve_command, "serve")
cli.add_command(agent_command, "agent")
cli.add_command(backup_command, "backup")
cli.add_command(restore_command, "restore")
click.version_option(__version__, prog_name="runplane", message="%(prog)s %(version)s")(cli)


def main(argv: Sequence[str] | None = None) -> int:
    return run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    raise SystemExit(main())
