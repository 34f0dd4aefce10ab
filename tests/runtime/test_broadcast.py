"""Topics, rings and the hub: replay, lag, drops, and never blocking the publisher."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from runplane.runtime import Cursor, Hub, Lagged, Ring


async def read(cursor: Cursor[Any], n: int) -> list[tuple[int, Any]]:
    return [await cursor.receive() for _ in range(n)]


# -- rings --------------------------------------------------------------------


async def test_ring_replays_after_a_seq_then_follows_the_live_tail(
    autojump_clock: trio.abc.Clock,
) -> None:
    ring: Ring[str] = Ring("job-1", capacity=16)
    assert [ring.publish(f"line {i}") for i in range(1, 6)] == [1, 2, 3, 4, 5]
    with ring.subscribe(from_seq=2) as cursor:
        assert await read(cursor, 3) == [(3, "line 3"), (4, "line 4"), (5, "line 5")]

        async def later() -> None:
            await trio.sleep(1)
            ring.publish("line 6")
            await trio.sleep(1)
            ring.publish("line 7")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(later)
            assert await read(cursor, 2) == [(6, "line 6"), (7, "line 7")]
        assert trio.current_time() == pytest.approx(2)


async def test_receive_many_takes_everything_ready_up_to_the_limit() -> None:
    ring: Ring[int] = Ring(capacity=8)
    with ring.subscribe(from_seq=0) as cursor:
        for i in range(1, 6):
            ring.publish(i * 10)
        assert await cursor.receive_many(3) == [(1, 10), (2, 20), (3, 30)]
        assert await cursor.receive_many(100) == [(4, 40), (5, 50)]
        for i in range(6, 17):  # 11 more: 9..16 retained, 6..8 overwritten
            ring.publish(i * 10)
        with pytest.raises(Lagged) as caught:
            await cursor.receive_many(100)
        assert caught.value.dropped == 3
        assert [seq for seq, _ in await cursor.receive_many(100)] == list(range(9, 17))
        ring.close()
        with pytest.raises(trio.EndOfChannel):
            await cursor.receive_many(1)
        with pytest.raises(ValueError):
            await cursor.receive_many(0)


async def test_receive_many_stops_where_the_ring_overwrote_during_its_yield(
    autojump_clock: trio.abc.Clock,
) -> None:
    ring: Ring[int] = Ring(capacity=4)
    with ring.subscribe(from_seq=0) as cursor:
        ring.publish(1)
        ring.publish(2)

        async def flood() -> None:
            for i in range(3, 20):  # runs while receive() yields after taking seq 1
                ring.publish(i)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(flood)
            batch = await cursor.receive_many(10)
        assert batch[0] == (1, 1)
        # never an overwritten slot passed off as an old seq: either only seq 1, or a
        # contiguous run whose items are their own seqs
        assert all(item == seq for seq, item in batch)
        assert [seq for seq, _ in batch] == list(range(1, len(batch) + 1))


async def test_ring_subscribe_positions() -> None:
    ring: Ring[int] = Ring(capacity=8)
    for i in range(3):
        ring.publish(i)
    assert ring.subscribe(from_seq=0).next_seq == 1  # everything retained
    assert ring.subscribe().next_seq == 4  # live tail only
    assert ring.subscribe(from_seq=99).next_seq == 4  # beyond the end: live
    assert ring.retained(after_seq=1) == [(2, 1), (3, 2)]
    with pytest.raises(ValueError):
        ring.subscribe(from_seq=-1)


async def test_ring_lag_reports_the_exact_count_and_resumes_at_the_oldest() -> None:
    ring: Ring[int] = Ring(capacity=4)
    with ring.subscribe(from_seq=0) as cursor:
        ring.publish(1)
        ring.publish(2)
        assert await cursor.receive() == (1, 1)
        for i in range(3, 11):  # 10 published, 7..10 retained
            ring.publish(i)
        assert (ring.first_seq, ring.last_seq) == (7, 10)
        with pytest.raises(Lagged) as caught:
            await cursor.receive()
        assert caught.value.dropped == 5  # seqs 2..6 were overwritten before it read them
        assert await read(cursor, 4) == [(7, 7), (8, 8), (9, 9), (10, 10)]
        stats = ring.statistics()
        assert (stats.size, stats.capacity, stats.dropped, stats.last_seq) == (4, 4, 5, 10)
        assert stats.subscribers == 1
    assert ring.statistics().subscribers == 0


async def test_ring_lag_from_history_outside_the_ring() -> None:
    ring: Ring[str] = Ring(capacity=8, next_seq=101)  # 1..100 live only in the store
    assert ring.publish("x") == 101
    with ring.subscribe(from_seq=40) as cursor:
        with pytest.raises(Lagged) as caught:
            await cursor.receive()
        assert caught.value.dropped == 60  # 41..100: read them from the store
        assert await cursor.receive() == (101, "x")


async def test_ring_close_ends_iteration_after_draining(autojump_clock: trio.abc.Clock) -> None:
    ring: Ring[int] = Ring(capacity=8)
    seen: list[tuple[int, int]] = []

    async def follow() -> None:
        with ring.subscribe(from_seq=0) as cursor:
            async for entry in cursor:
                seen.append(entry)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        for i in range(5):
            ring.publish(i)
            await trio.sleep(1)
        ring.close()
    assert seen == [(1, 0), (2, 1), (3, 2), (4, 3), (5, 4)]
    with pytest.raises(trio.ClosedResourceError):
        ring.publish(5)
    # a late subscriber still replays a closed ring, then ends
    with ring.subscribe(from_seq=3) as late:
        assert [entry async for entry in late] == [(4, 3), (5, 4)]


async def test_ring_stalled_subscriber_does_not_slow_100_others(
    autojump_clock: trio.abc.Clock,
) -> None:
    ring: Ring[int] = Ring(capacity=32)
    n = 500
    received: list[list[int]] = []

    async def reader(cursor: Cursor[int]) -> None:
        got: list[int] = []
        received.append(got)
        with cursor:
            async for seq, item in cursor:
                assert seq == item
                got.append(item)

    stalled = ring.subscribe(from_seq=0)  # never reads
    async with trio.open_nursery() as nursery:
        for _ in range(100):
            nursery.start_soon(reader, ring.subscribe(from_seq=0))
        await trio.lowlevel.checkpoint()
        t0 = trio.current_time()
        for i in range(1, n + 1):
            assert ring.publish(i) == i
            await trio.sleep(0.01)
        published_in = trio.current_time() - t0
        ring.close()
    assert published_in == pytest.approx(n * 0.01)  # the publisher never waited
    assert len(received) == 100
    assert all(got == list(range(1, n + 1)) for got in received)
    with pytest.raises(Lagged) as caught:
        await stalled.receive()
    assert caught.value.dropped == n - 32
    assert ring.statistics().dropped == n - 32
    assert await stalled.receive() == (n - 31, n - 31)


# -- hub ----------------------------------------------------------------------


async def test_hub_makes_on_demand_and_discards() -> None:
    hub = Hub(ring_capacity=4)
    ring = hub.ring("job-1")
    assert hub.ring("job-1") is ring and ring.capacity == 4
    assert hub.find_ring("job-2") is None
    ring.publish("x")
    cursor = ring.subscribe(from_seq=0)
    hub.discard_ring("job-1")
    assert ring.closed and hub.find_ring("job-1") is None
    assert await cursor.receive() == (1, "x")
    with pytest.raises(trio.EndOfChannel):
        await cursor.receive()
    assert hub.ring("job-1") is not ring  # a fresh stream
    assert hub.statistics().rings == 1


async def test_hub_keeps_a_bounded_number_of_closed_rings() -> None:
    hub = Hub(ring_capacity=8, max_closed_rings=2)
    for i in range(5):
        ring = hub.ring(f"job-{i}")
        ring.publish(i)
        ring.close()
    hub.ring("live").publish("still going")
    stats = hub.statistics()
    assert (stats.rings, stats.closed_rings, stats.retained) == (3, 2, 3)
    assert hub.find_ring("job-0") is None and hub.find_ring("job-2") is None
    assert hub.find_ring("job-3") is not None and hub.find_ring("job-4") is not None
    # a closed ring still replays until it is evicted
    with hub.ring("job-4").subscribe(from_seq=0) as cursor:
        assert [entry async for entry in cursor] == [(1, 4)]
