"""store: SQLite vs PostgreSQL commit throughput through the Store interface.

    python -m bench store [--quick] [--skip-postgres]

Runs ``bench/store.py`` (single writer, 100 concurrent writers with group commit, and
``execute_many`` batches, each phase time-bounded, on a fresh database of each engine; see
its docstring) in its own process and adds the machine and settings. PostgreSQL is
``RUNPLANE_TEST_PG_URL`` when set, else the server ``scripts/pgtest start DIR`` gives,
``DIR`` being ``RUNPLANE_BENCH_PG_DIR`` or ``/tmp/rp-pg-dev``: started if it is not
running (on a free port) and stopped at the end; one already running there is used and
left running. Each run uses a fresh database in it, dropped after. Without a
PostgreSQL the scenario reports SQLite only and says why. Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from typing import Any

from bench import common, store


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=None, help="length of each phase")
    parser.add_argument("--skip-postgres", action="store_true")
    args = parser.parse_args(argv)
    seconds = args.seconds or (1.0 if args.quick else 3.0)
    argv_store = ["bench.store", "--seconds", str(seconds)]
    if args.skip_postgres:
        argv_store.append("--skip-postgres")
    started = time.monotonic()
    env = dict(os.environ)
    pg_note = "RUNPLANE_TEST_PG_URL"
    with contextlib.ExitStack() as servers:
        if not args.skip_postgres and not env.get("RUNPLANE_TEST_PG_URL", "").strip():
            pg_dir = env.get("RUNPLANE_BENCH_PG_DIR") or "/tmp/rp-pg-dev"
            try:
                env["RUNPLANE_TEST_PG_URL"] = servers.enter_context(store.pgtest_server(pg_dir))
                pg_note = f"scripts/pgtest start {pg_dir}"
            except store.PgtestError as exc:
                argv_store.append("--skip-postgres")
                pg_note = f"no PostgreSQL: {exc}"
        raw = common.run_json(argv_store, timeout=600, env=env)
    summary = {}
    for engine in ("sqlite", "postgres"):
        if engine in raw:
            summary[engine] = {
                k: raw[engine][k]
                for k in (
                    "single_writes_per_s",
                    "concurrent_100_writes_per_s",
                    "batched_rows_per_s",
                )
            }
    result = {
        "bench": "store",
        "machine": {**common.machine(), "postgres": raw.get("machine", {}).get("postgres")},
        "settings": {"phase_seconds": seconds, "script": "bench/store.py", "postgres": pg_note},
        "summary": summary,
        "store": raw,
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    common.emit(result)
    return result


if __name__ == "__main__":
    main()
