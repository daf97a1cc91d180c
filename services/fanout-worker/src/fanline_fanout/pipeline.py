"""Events processed side by side, acknowledged in offset order.

The agent used to take events in batches (``Stream.take_events``) and wait
for a whole batch before it took the next: every event waited for the
slowest of its batch. Measured in the celebrity benchmark, a large fan-out's
slices (each handed on before it is written, to be written side by side)
were in fact written one after another — the next slice always arrived while
the batch holding the previous one was still writing — so 1,000,000
followers took 249 s at 4,000 rows/s, a tenth of what the same worker writes
for many ordinary authors at once.

``OrderedPipeline`` has no batch barrier: an event starts as soon as it
arrives and a slot is free, and a slot frees as soon as its event is done.
What a batch gave for free is kept:

* **Order per key**: events with the same key (the author; a slice's own key)
  run one after another, in arrival order.
* **Nothing committed early**: faust commits whatever offsets are acked, and
  its own handling of gaps between acked offsets is what makes agent
  ``concurrency > 1`` commit past in-flight messages (faust-streaming #606:
  ``Consumer._new_offset`` lets a gap of exactly one offset through). So each
  partition's events are acked strictly in offset order, an event only once it
  and every event before it in its partition are done: the acked offsets
  never have a gap, and a crash redelivers from the first event not done.
  Redelivered events are applied again, which is idempotent (rows are keyed by
  owner and tweet).
* **Bounded**: at most ``window`` events run at once, and at most
  ``max_unacked`` are held (waiting in their key's lane, or done-but-unacked
  behind a slow one; then the agent stops taking events until it finishes).

An event waiting in its key's lane holds no slot: it takes over its
predecessor's when that one is done. When the slots counted the waiting
events too, a worker whose partitions held few authors spent most of its
slots on events waiting behind their own author's previous tweet: with 4
workers, 16 authors each and 4 tweets apiece, the benchmark's
latency-scaling phase ran about half of its 16 slots, and 4 workers drained
the same backlog at 1.4x the rate of one.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

E = TypeVar("E")


@dataclass(eq=False)
class _Entry(Generic[E]):
    event: E
    done: bool = False
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class OrderedPipeline(Generic[E]):
    """Run ``process`` on events as they are submitted; ``ack`` each one in
    its partition's order once it and all before it are done.

    ``process`` must not raise (``Processor.process`` never does: failures
    become retries or dead letters); if it does, the event still counts as
    done — exactly what faust did with an agent that raised — and the error
    is re-raised by ``close``. ``key``: events with equal keys run one after
    another. ``partition``: the unit of ordered acks (the message's
    topic-partition)."""

    def __init__(
        self,
        process: Callable[[E], Awaitable[None]],
        ack: Callable[[E], Awaitable[Any]],
        *,
        key: Callable[[E], Hashable],
        partition: Callable[[E], Hashable],
        window: int,
        max_unacked: int | None = None,
    ) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self._process = process
        self._ack = ack
        self._key = key
        self._partition = partition
        self._window = window
        self._max_unacked = max(window, max_unacked if max_unacked is not None else 64 * window)
        self._running = 0
        self._unacked = 0
        self._pending: dict[Hashable, deque[_Entry[E]]] = {}
        self._lanes: dict[tuple[Hashable, Hashable], asyncio.Task[None]] = {}
        self._changed = asyncio.Event()
        self._errors: list[BaseException] = []

    @property
    def running(self) -> int:
        """Events holding a slot: running, not waiting in their key's lane."""
        return self._running

    @property
    def unacked(self) -> int:
        """Events submitted and not acked yet."""
        return self._unacked

    async def submit(self, event: E) -> None:
        """Start ``event`` once a slot is free (back-pressure: the caller
        stops reading the stream meanwhile)."""
        while self._running >= self._window or self._unacked >= self._max_unacked:
            self._changed.clear()
            await self._changed.wait()
        partition = self._partition(event)
        lane = (partition, self._key(event))
        entry: _Entry[E] = _Entry(event)
        self._pending.setdefault(partition, deque()).append(entry)
        before = self._lanes.get(lane)
        if before is None:
            self._running += 1  # else it takes its predecessor's slot when that one is done
        self._unacked += 1
        entry.task = asyncio.create_task(self._run(entry, partition, lane, before))
        self._lanes[lane] = entry.task

    async def _run(
        self, entry: _Entry[E], partition: Hashable, lane: tuple[Hashable, Hashable], before: asyncio.Task[None] | None
    ) -> None:
        try:
            if before is not None:
                # The previous event of this key: wait for it, whatever its fate.
                await asyncio.wait([before])
            await self._process(entry.event)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - kept for close(); the event counts as done
            self._errors.append(exc)
        finally:
            if self._lanes.get(lane) is entry.task:
                del self._lanes[lane]
                self._running -= 1
            # else: the next event of this key waits on this one and takes its slot
            self._changed.set()
        entry.done = True
        await self._ack_done(partition)

    async def _ack_done(self, partition: Hashable) -> None:
        queue = self._pending.get(partition)
        while queue and queue[0].done:
            head = queue.popleft()
            self._unacked -= 1
            await self._ack(head.event)
        if queue is not None and not queue:
            del self._pending[partition]
        self._changed.set()

    async def drain(self) -> None:
        """Wait until every submitted event is done and acked."""
        while self._unacked:
            self._changed.clear()
            await self._changed.wait()

    async def close(self) -> None:
        """Cancel what is still running (nothing more is acked: it will be
        redelivered), then raise the first error ``process`` raised, if any."""
        tasks = [
            entry.task for queue in self._pending.values() for entry in queue if entry.task is not None and not entry.task.done()
        ]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._errors:
            raise self._errors[0]
