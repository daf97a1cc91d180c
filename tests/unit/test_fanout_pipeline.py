"""The worker's pipeline: one lane per event key, in order; lanes concurrent;
no batch barrier; acks strictly in each partition's offset order."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

import pytest

from fanline_fanout.config import Settings
from fanline_fanout.pipeline import OrderedPipeline


@dataclass(frozen=True)
class Ev:
    partition: int
    offset: int
    key: str


def pipeline(process, acked: list[Ev], window: int = 16, max_unacked: int | None = None) -> OrderedPipeline[Ev]:
    async def ack(event: Ev) -> None:
        acked.append(event)

    return OrderedPipeline(
        process, ack, key=lambda e: e.key, partition=lambda e: e.partition, window=window, max_unacked=max_unacked
    )


async def test_same_key_in_order_different_keys_concurrently() -> None:
    started: list[str] = []
    finished: list[str] = []
    gate = asyncio.Event()

    async def process(event: Ev) -> None:
        name = f"{event.key}{event.offset}"
        started.append(name)
        if name == "a0":
            await gate.wait()  # a0 is slow: a2 must wait for it, b1 must not
        finished.append(name)
        if name == "b1":
            gate.set()

    acked: list[Ev] = []
    p = pipeline(process, acked)
    for offset, key in enumerate("abac"):
        await p.submit(Ev(0, offset, key))
    await asyncio.wait_for(p.drain(), 1)
    await p.close()
    assert started.index("b1") < finished.index("a0")  # b did not wait for a
    assert finished.index("a0") < started.index("a2")  # a2 only after a0
    assert sorted(finished) == ["a0", "a2", "b1", "c3"]
    assert [e.offset for e in acked] == [0, 1, 2, 3]


async def test_no_batch_barrier_a_slow_event_does_not_hold_up_later_ones() -> None:
    """What the batches did wrong: a slice handed on while another slice was
    being written waited for it. Here event 1 finishes while event 0 runs."""
    slow = asyncio.Event()
    finished: list[int] = []

    async def process(event: Ev) -> None:
        if event.offset == 0:
            await slow.wait()
        finished.append(event.offset)

    acked: list[Ev] = []
    p = pipeline(process, acked, window=2)
    await p.submit(Ev(0, 0, "big"))
    await p.submit(Ev(0, 1, "x"))
    await asyncio.sleep(0.01)
    await asyncio.wait_for(p.submit(Ev(0, 2, "y")), 1)  # a slot freed without waiting for event 0
    await asyncio.sleep(0.01)
    assert finished == [1, 2]
    assert acked == []  # ...but nothing is acked past the unfinished event 0
    slow.set()
    await asyncio.wait_for(p.drain(), 1)
    assert [e.offset for e in acked] == [0, 1, 2]
    await p.close()


async def test_acks_per_partition_in_offset_order_whatever_the_finishing_order() -> None:
    rng = random.Random(7)
    events = [Ev(partition, offset, f"k{rng.randrange(12)}") for offset in range(60) for partition in range(3)]
    rng.shuffle(events)
    events.sort(key=lambda e: (e.offset,))  # arrival in offset order per partition, interleaved
    done: set[Ev] = set()
    order_errors: list[str] = []
    acked: list[Ev] = []

    active = [0, 0]  # now, most at once

    async def process(event: Ev) -> None:
        active[0] += 1
        active[1] = max(active[1], active[0])
        await asyncio.sleep(rng.random() / 200)
        done.add(event)
        active[0] -= 1

    async def ack(event: Ev) -> None:
        # Never acked before it and every earlier event of its partition are done.
        if any(e.partition == event.partition and e.offset <= event.offset and e not in done for e in events):
            order_errors.append(f"acked {event} early")
        acked.append(event)

    p: OrderedPipeline[Ev] = OrderedPipeline(process, ack, key=lambda e: e.key, partition=lambda e: e.partition, window=8)
    for event in events:
        await p.submit(event)
        assert p.running <= 8
    await asyncio.wait_for(p.drain(), 5)
    await p.close()
    assert active[1] <= 8  # never more than the window at once
    assert order_errors == []
    for partition in range(3):
        assert [e.offset for e in acked if e.partition == partition] == list(range(60))


async def test_an_event_waiting_in_its_lane_holds_no_slot() -> None:
    """Few authors, several tweets each (a worker's share of partitions):
    a1 and a2 wait for the slow a0 without taking the slots b and c need."""
    slow = asyncio.Event()
    started: list[str] = []

    async def process(event: Ev) -> None:
        started.append(f"{event.key}{event.offset}")
        if event.offset == 0:
            await slow.wait()

    acked: list[Ev] = []
    p = pipeline(process, acked, window=2)
    for offset, key in enumerate("aaabc"):
        await asyncio.wait_for(p.submit(Ev(0, offset, key)), 1)
    await asyncio.sleep(0.01)
    assert started == ["a0", "b3", "c4"]
    assert p.running == 1  # a0 (a1 and a2 wait in its lane, without a slot)
    slow.set()
    await asyncio.wait_for(p.drain(), 1)
    assert started == ["a0", "b3", "c4", "a1", "a2"]
    assert [e.offset for e in acked] == [0, 1, 2, 3, 4]
    assert p.running == 0
    await p.close()


async def test_unacked_events_are_bounded_behind_a_slow_one() -> None:
    slow = asyncio.Event()

    async def process(event: Ev) -> None:
        if event.offset == 0:
            await slow.wait()

    acked: list[Ev] = []
    p = pipeline(process, acked, window=2, max_unacked=4)
    for offset in range(4):
        await p.submit(Ev(0, offset, f"k{offset}"))
    blocked = asyncio.ensure_future(p.submit(Ev(0, 4, "k4")))
    await asyncio.sleep(0.02)
    assert not blocked.done()  # four done-or-running and unacked: no fifth
    assert p.unacked == 4
    slow.set()
    await asyncio.wait_for(blocked, 1)
    await asyncio.wait_for(p.drain(), 1)
    assert [e.offset for e in acked] == [0, 1, 2, 3, 4]
    await p.close()


async def test_close_cancels_what_runs_and_acks_nothing_more() -> None:
    cancelled: list[int] = []

    async def process(event: Ev) -> None:
        if event.offset == 1:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.append(event.offset)
                raise

    acked: list[Ev] = []
    p = pipeline(process, acked)
    for offset in range(3):
        await p.submit(Ev(0, offset, f"k{offset}"))
    await asyncio.sleep(0.01)
    await asyncio.wait_for(p.close(), 1)
    assert cancelled == [1]
    assert [e.offset for e in acked] == [0]  # 1 was cut short and 2 is behind it: both are redelivered


async def test_an_error_counts_as_done_and_is_raised_by_close() -> None:
    async def process(event: Ev) -> None:
        if event.offset == 0:
            raise RuntimeError("boom")

    acked: list[Ev] = []
    p = pipeline(process, acked)
    await p.submit(Ev(0, 0, "a"))
    await p.submit(Ev(0, 1, "a"))
    await asyncio.wait_for(p.drain(), 1)
    assert [e.offset for e in acked] == [0, 1]
    with pytest.raises(RuntimeError, match="boom"):
        await p.close()


def test_window_must_be_positive() -> None:
    with pytest.raises(ValueError):
        OrderedPipeline(lambda e: asyncio.sleep(0), lambda e: asyncio.sleep(0), key=id, partition=id, window=0)
    assert Settings.from_env({}).batch_size == 16
