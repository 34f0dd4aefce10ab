"""A replica whose fencing epoch is over answers a write 503 ``not_leader`` with
Retry-After, and nothing of the write is stored (docs/operations.md "High availability";
the fence itself: tests/persistence/test_ha_lease.py). On the PostgreSQL of scripts/test."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from runplane.http.app import create_app
from runplane.persistence.postgres import Fence, PostgresStore
from runplane.settings import Settings


async def test_a_write_after_another_replica_took_the_lease_is_503_not_leader(
    make_settings: Callable[..., Settings], pg_database: str
) -> None:
    fence = Fence(idle_timeout_ms=3000)
    fence.epoch = 1  # this replica leads epoch 1 (no lease row yet: nothing to contradict it)
    fenced: list[bool] = []
    fence.on_fenced = lambda: fenced.append(True)
    async with PostgresStore(pg_database, fence=fence) as store:
        app = create_app(make_settings(database_url=pg_database), store=store)
        async with app.test_app():
            client = app.test_client()
            body = {"stack": "shell", "command": ["true"]}
            first = await client.post("/v1/jobs", json=body)
            assert first.status_code == 202, await first.get_data()

            # another replica takes the lease: epoch 2
            with psycopg.connect(pg_database, autocommit=True) as conn:
                conn.execute(
                    "INSERT INTO ha_lease (name, epoch, holder, address, acquired_at, expires_at)"
                    " VALUES ('leader', 2, 'other', 'http://other:8080', 0, 9999999999999)"
                )
            refused = await client.post("/v1/jobs", json=body)
            problem = await refused.get_json()
            assert refused.status_code == 503 and problem["code"] == "not_leader", problem
            assert refused.headers["Retry-After"] == "1"
            assert fenced == [True]
        with psycopg.connect(pg_database) as conn:
            [(count,)] = conn.execute("SELECT count(*) FROM jobs").fetchall()
        assert count == 1  # the acknowledged one only
