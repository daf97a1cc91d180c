"""The adaptive fan-out limit (tweet-store limiter.py): grows while writes come
back fast, shrinks when they queue, stricter while people are served, FIFO."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from prometheus_client import REGISTRY

from fanline_tweet_store.limiter import AdaptiveLimit, LimitPolicy
from fanline_tweet_store.write_context import bulk_writes


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def drive(limit: AdaptiveLimit, clock: Clock, rtt_s: float | Callable[[int], float], rounds: int) -> None:
    """``rounds`` round trips with every slot the limiter gives in flight (a
    write waits for every slot freed: the limit, or its probe's few), each
    write taking ``rtt_s`` — or ``rtt_s(writes in flight)``: a node whose
    latency grows with ours is a queue of ours."""
    for _ in range(rounds):
        width = limit.cap
        rtt = rtt_s(width) if callable(rtt_s) else rtt_s
        for _ in range(width):
            limit.in_flight = width
            clock.now += rtt / width
            limit.release(rtt, depth=width)
        limit.in_flight = 0


def queue_of_ours(unloaded_s: float, served: int = 4) -> Callable[[int], float]:
    """A node serving ``served`` writes at once in ``unloaded_s``: more of
    ours in flight wait in line behind each other."""
    return lambda width: unloaded_s * max(1.0, width / served)


def test_doubles_per_round_trip_with_no_queue_and_shrinks_when_queueing() -> None:
    """Slow start: writes as fast as the best one seen (no queue) add one
    slot each, so a far Cassandra (0.4 s) reaches its limit in a few
    round trips instead of a few hundred."""
    clock = Clock()
    limit = AdaptiveLimit(LimitPolicy(initial=4, maximum=64), busy=lambda: False, clock=clock)
    drive(limit, clock, 0.005, 3)
    assert 24 <= limit.limit <= 32  # 4 -> 8 -> 16 -> 32
    grown = limit.limit
    drive(limit, clock, queue_of_ours(0.005, served=2), 6)  # 32 in flight: 16x the unloaded 5 ms
    assert limit.limit <= grown * 0.8**2
    drive(limit, clock, 0.005, 200)
    assert limit.limit == 64  # capped


def test_grows_about_one_per_round_trip_while_a_small_queue_of_ours_builds() -> None:
    clock = Clock()
    limit = AdaptiveLimit(LimitPolicy(initial=8, maximum=256), busy=lambda: False, clock=clock)
    drive(limit, clock, 0.005, 1)  # the baseline: 5 ms (and slow start to 16)
    drive(limit, clock, 0.009, 1)  # the moving average catches up
    start = limit.limit
    # 1.8x the baseline: a queue builds (past 1.125x + 2 ms), but within
    # the idle tolerance (3x + 2 ms): growth slows to ~1 per round trip.
    drive(limit, clock, 0.009, 10)
    assert start + 5 <= limit.limit <= start + 11


def test_busy_tolerates_less_queueing_than_idle() -> None:
    idle_clock, busy_clock = Clock(), Clock()
    idle = AdaptiveLimit(LimitPolicy(initial=16), busy=lambda: False, clock=idle_clock)
    busy = AdaptiveLimit(LimitPolicy(initial=16), busy=lambda: True, clock=busy_clock)
    grown = {}
    for limit, clock in ((idle, idle_clock), (busy, busy_clock)):
        drive(limit, clock, 0.010, 2)  # the baseline: 10 ms
        grown[id(limit)] = limit.limit
        # ~2.2x the unloaded 10 ms at 64 in flight, queueing behind our own
        # writes: too slow while busy (1.5x), fine idle (3x)
        drive(limit, clock, lambda width: 0.010 * max(1.0, width / 29), 6)
    assert idle.limit > grown[id(idle)]
    assert busy.limit < grown[id(busy)]


def test_a_failed_write_shrinks_the_limit() -> None:
    clock = Clock()
    limit = AdaptiveLimit(LimitPolicy(initial=10), busy=lambda: False, clock=clock)
    before = REGISTRY.get_sample_value("fanline_fanout_write_limit_decreases_total", {"cause": "failed"}) or 0.0
    limit.in_flight = 1
    limit.release(None)
    assert limit.limit == 8
    # Counted by cause, so a dashboard shows what keeps the limit down.
    assert REGISTRY.get_sample_value("fanline_fanout_write_limit_decreases_total", {"cause": "failed"}) == before + 1


async def test_write_all_keeps_the_page_window_and_the_shared_limit() -> None:
    limit = AdaptiveLimit(LimitPolicy(initial=3, maximum=3), busy=lambda: False)
    in_flight = {"now": 0, "max": 0, "a": 0, "max_a": 0}
    done: list[str] = []

    async def write(item: str) -> None:
        in_flight["now"] += 1
        in_flight["max"] = max(in_flight["max"], in_flight["now"])
        if item.startswith("a"):
            in_flight["a"] += 1
            in_flight["max_a"] = max(in_flight["max_a"], in_flight["a"])
        await asyncio.sleep(0.001)
        done.append(item)
        in_flight["now"] -= 1
        if item.startswith("a"):
            in_flight["a"] -= 1

    big = limit.write_all([f"a{n}" for n in range(60)], write, window=2)
    small = limit.write_all(["b0", "b1"], write, window=2)
    await asyncio.gather(big, small)
    assert in_flight["max"] <= 3 and in_flight["max_a"] <= 2
    assert done.index("b1") < 20  # the small page is written beside the big one, not after it


async def test_write_all_raises_the_first_failure_after_the_rest_settle() -> None:
    limit = AdaptiveLimit(LimitPolicy(initial=4), busy=lambda: False)

    async def write(item: int) -> None:
        await asyncio.sleep(0)
        if item == 3:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await limit.write_all(range(20), write, window=4)
    assert limit.in_flight == 0


async def test_bulk_writes_yield_to_ordinary_ones_and_never_hold_the_last_slot() -> None:
    """A large fan-out's slices (bulk) take what ordinary fan-outs leave: an
    ordinary page queued behind a million bulk rows waits for at most the bulk
    writes already in flight."""
    limit = AdaptiveLimit(LimitPolicy(initial=4, maximum=4), busy=lambda: False)
    order: list[str] = []
    bulk_in_flight = {"now": 0, "max": 0}

    async def write(item: str) -> None:
        if item.startswith("bulk"):
            bulk_in_flight["now"] += 1
            bulk_in_flight["max"] = max(bulk_in_flight["max"], bulk_in_flight["now"])
        await asyncio.sleep(0.001)
        order.append(item)
        if item.startswith("bulk"):
            bulk_in_flight["now"] -= 1

    async def bulk() -> None:
        with bulk_writes():
            await limit.write_all([f"bulk{n}" for n in range(200)], write, window=8)

    async def ordinary() -> None:
        await asyncio.sleep(0.01)  # arrives while the bulk rows are queued
        await limit.write_all([f"ord{n}" for n in range(20)], write, window=2)

    await asyncio.gather(bulk(), ordinary())
    assert bulk_in_flight["max"] == 3  # never the last of the 4 slots
    # The ordinary page was written while bulk rows were still queued, not after them.
    assert order.index("ord19") < order.index("bulk199") and order.index("ord0") > order.index("bulk0")
    assert limit.in_flight == 0 and limit.bulk_in_flight == 0


async def test_a_freed_slot_goes_to_a_waiting_ordinary_write_before_an_earlier_bulk_one() -> None:
    limit = AdaptiveLimit(LimitPolicy(initial=4, maximum=4), busy=lambda: False)
    with bulk_writes():
        for _ in range(3):
            assert await limit.acquire() is True
        bulk_waiter = asyncio.ensure_future(limit.acquire())  # the 4th slot is not bulk's
    assert await limit.acquire() is False  # ... it is an ordinary write's, at once
    ordinary_waiter = asyncio.ensure_future(limit.acquire())  # arrives after the bulk waiter
    await asyncio.sleep(0)
    assert not bulk_waiter.done() and not ordinary_waiter.done()
    limit.release(0.001, bulk=True)
    await asyncio.sleep(0)
    assert ordinary_waiter.done() and not bulk_waiter.done()
    limit.release(0.001, bulk=False)
    await asyncio.sleep(0)
    assert bulk_waiter.done() and limit.bulk_in_flight == 3


async def test_a_cancelled_bulk_waiter_gives_its_place_back() -> None:
    limit = AdaptiveLimit(LimitPolicy(initial=2, maximum=2), busy=lambda: False)
    with bulk_writes():
        assert await limit.acquire() is True
        waiter = asyncio.ensure_future(limit.acquire())  # the last slot is not bulk's
        await asyncio.sleep(0)
        assert not waiter.done()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    assert await limit.acquire() is False  # an ordinary write still gets the free slot
    assert limit.in_flight == 2 and limit.bulk_in_flight == 1


def test_a_node_slow_for_other_reasons_does_not_collapse_the_limit() -> None:
    """Writes 8x slower than the best one seen, whatever the limit: a node
    busy with something else (compaction after millions of rows, the CPU
    shared with others), not a queue of ours. Judged on every write's
    latency alone, this drove the limit to 1-2 writes; against the best write
    of a window, to ~5. The probe measures the latency of writes run almost
    alone: as slow, so not ours, and the limit grows."""
    clock = Clock()
    limit = AdaptiveLimit(LimitPolicy(initial=2, probe=True), busy=lambda: False, clock=clock)
    before = REGISTRY.get_sample_value("fanline_fanout_write_limit_probes_total") or 0.0
    drive(limit, clock, 0.001, 3)  # the best write: 1 ms
    drive(limit, clock, 0.008, 300)  # 8x: past the idle tolerance (3x + 2 ms)
    assert limit.limit >= 64
    probes = (REGISTRY.get_sample_value("fanline_fanout_write_limit_probes_total") or 0.0) - before
    assert 1 <= probes <= clock.now // 10 + 1  # at most once per baseline window (10 s)


def test_a_probe_holds_writes_to_a_few_until_it_has_measured_them() -> None:
    """About to shrink with no recent unloaded write: new writes wait while
    more than ``probe_in_flight`` are in flight, until ``probe_samples``
    have run that way; then the limit is the limit again."""
    clock = Clock()
    policy = LimitPolicy(initial=16, probe=True)
    limit = AdaptiveLimit(policy, busy=lambda: False, clock=clock)
    drive(limit, clock, 0.001, 2)  # the best write: 1 ms, never one run alone
    assert not limit.probing
    drive(limit, clock, 0.020, 1)  # 20x: a queue, but whose?
    assert limit.probing and limit.cap == policy.probe_in_flight
    drive(limit, clock, 0.002, policy.probe_samples // policy.probe_in_flight)
    assert not limit.probing and limit.cap == int(limit.limit)
    assert limit.unloaded(clock.now) == pytest.approx(0.002)


def test_without_the_probe_a_noisy_node_holds_the_limit_down() -> None:
    """The default (``probe`` off) keeps the best write of the window as the
    baseline: writes 8x slower than it whatever the limit hold the limit at
    a handful — the trade the probe would change (docs/operations/scale.md)."""
    clock = Clock()
    limit = AdaptiveLimit(LimitPolicy(initial=2), busy=lambda: False, clock=clock)
    drive(limit, clock, 0.001, 3)
    drive(limit, clock, 0.008, 300)
    assert 4 <= limit.limit < 12
    assert not limit.probing


def test_our_queue_still_shrinks_the_limit_after_a_probe() -> None:
    """A node that serves 4 writes at once in 5 ms: at 64 in flight ours wait
    16x; the probe sees 5 ms, so the queue is ours and the limit settles
    where a few of ours wait (Vegas' count, ``queue_floor``)."""
    clock = Clock()
    limit = AdaptiveLimit(LimitPolicy(initial=64, probe=True), busy=lambda: False, clock=clock)
    drive(limit, clock, queue_of_ours(0.005), 300)
    assert 4 <= limit.limit <= 16


def test_one_slow_write_is_not_a_queue() -> None:
    clock = Clock()
    limit = AdaptiveLimit(LimitPolicy(initial=16), busy=lambda: True, clock=clock)
    drive(limit, clock, 0.005, 3)
    before = limit.limit
    limit.in_flight = int(limit.limit)
    limit.release(0.200)  # a GC pause or a flush: 40x
    assert limit.limit >= before


def test_jitter_of_a_far_node_does_not_end_the_fast_phase() -> None:
    """0.4 s away, writes 3 % over the best one: no queue, still doubling
    (Vegas' count of our writes waiting, 3 % of 64, would say two)."""
    clock = Clock()
    limit = AdaptiveLimit(LimitPolicy(initial=8, maximum=256), busy=lambda: False, clock=clock)
    drive(limit, clock, 0.402, 1)
    drive(limit, clock, 0.415, 3)
    assert limit.limit >= 100
