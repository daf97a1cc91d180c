"""argon2 under a memory budget.

Every argon2id hash (sign-up) and verification (log-in, also for unknown
names) holds ``FANLINE_ARGON2_MEMORY_KIB`` of memory (64 MiB by default)
while it runs. Run in the default thread pool, their number was bounded only
by the host's CPU count (min(32, CPUs + 4) threads): a burst of failed
log-ins took a 2-CPU social-graph from 58 to 444 MiB, and would need about
1.3 GiB on a 16-CPU node. Here at most
``FANLINE_ARGON2_MEMORY_BUDGET_MIB / memory cost`` hashes run at once, on a
pool of exactly that many threads; a request waits at most
``FANLINE_ARGON2_QUEUE_WAIT_S`` for a slot, then gets ``503 unavailable``
with ``Retry-After`` — the process's memory never grows past the budget.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from fanline_shared import metrics
from fanline_shared.errors import Unavailable

T = TypeVar("T")


def slots_for(budget_mib: int, memory_kib: int) -> int:
    """How many hashes fit in the budget (at least one, or nobody could log in)."""
    return max(1, (budget_mib * 1024) // memory_kib)


class Argon2Budget:
    """Runs argon2 calls off the event loop, at most ``slots`` at a time."""

    def __init__(self, slots: int, queue_wait_s: float) -> None:
        self.slots = slots
        self._wait_s = queue_wait_s
        self._free = asyncio.Semaphore(slots)
        self._pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="argon2")

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` on the argon2 pool, or ``Unavailable`` (503) if no
        slot frees up within the queue wait."""
        try:
            await asyncio.wait_for(self._free.acquire(), timeout=self._wait_s)
        except TimeoutError:
            metrics.ARGON2_REFUSED.inc()
            raise Unavailable("too many sign-ins in progress; try again in a moment", retry_after=1) from None
        metrics.ARGON2_IN_USE.inc()
        loop = asyncio.get_running_loop()
        try:
            future = self._pool.submit(fn, *args)
        except BaseException:
            self._release()
            raise
        # The slot is freed when the hash has finished, not when the request
        # stops waiting for it: a client that hangs up must not free memory
        # that a still-running hash holds.
        future.add_done_callback(lambda _: _call_soon(loop, self._release))
        return await asyncio.wrap_future(future)

    def _release(self) -> None:
        metrics.ARGON2_IN_USE.dec()
        self._free.release()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    try:
        loop.call_soon_threadsafe(callback)
    except RuntimeError:
        pass  # the loop is closed: the process is shutting down
