"""An adaptive limit on the fan-out writes in flight in one tweet-store process.

The fan-out shares Cassandra with the people waiting for a post or a page:
every fan-out write in flight is queue their statements wait behind. A fixed
window or rate is right on one machine only (the last one here was 2,000
rows/s while anyone was served, measured on two cores — 9 minutes to reach a
million followers). This limit finds the right number itself, in the spirit
of Netflix's concurrency-limits (Vegas / Gradient): it watches the latency of
its own writes against the lowest latency seen recently (the no-queue
baseline), and

* **grows** while the writes it has in flight come back within ``tolerance
  x baseline`` and it uses at least half of its limit: by one write per
  write that comes back (doubling per round trip, TCP's slow start) while
  the writes are within ``probe_share`` of the baseline (plus ``slack_s``)
  — no queue anywhere, the delay-increase exit of TCP's HyStart — and by
  one write per round trip past that. Without the fast phase a limit
  started at 8 needed ~250 round trips to reach 256: about 100 s with
  Cassandra 0.4 s away, longer than a whole drain of 500,000 rows (the
  benchmark's latency-scaling phase ended with four replicas' limits still
  climbing at ~170, never having shrunk once). Judged by Vegas' count of
  our writes waiting instead (fast while under one), it left the fast
  phase at ~30 in flight: 3 % of jitter through the proxy is one write in 30;
* **shrinks** by ``backoff`` (at most once per round trip) when its writes
  take longer — a queue is building at Cassandra — and that queue can be
  ours: the moving average of write latency (not one write: a single slow
  write is a GC pause or a flush, not a queue) is past the tolerance, *and*
  Vegas' estimate of our own writes waiting, ``in_flight x (1 - baseline /
  latency)``, is at least ``queue_floor``. A handful of writes in flight
  cannot be what slows a node down; without that floor a Cassandra slowed by
  something else (compaction after millions of rows) drove the limit to 1-2
  writes, 7,000 rows/s while the node had cores to spare (measured in the
  benchmark's post-latency drain);
* with ``probe`` on (``FANLINE_FANOUT_LIMIT_PROBE``; off by default, see
  ``LimitPolicy.probe``), **asks before it shrinks** whether the queue grows with its own writes
  (the probe, after BBR's ProbeRTT): the best write of a window is a lucky
  one on a node whose CPU is shared, and ordinary scheduling noise there
  makes every write look several times slower than it. Judged against that
  minimum, the limit sat at 5-7 writes with ~70 decreases a second through
  the benchmark's long post-phase drain, the node a third idle and the
  drain at a third of its short-drain speed. So when the limit is about to
  shrink and no recent write ran almost alone, new writes are held to
  ``probe_in_flight`` until ``probe_samples`` have run that way; their
  median latency is the node's *unloaded* latency, noise included, and
  Vegas' count uses it (whichever is higher) until it is
  ``baseline_window_s`` old. A queue of ours still shows (latency grows
  with our writes in flight, past the unloaded one); a slow node or a noisy
  one no longer does. A probe costs about four round trips at two writes in
  flight, at most once a window, and only while the limit would shrink;
* is **stricter while people are served** (``busy()``: a user-facing request
  ran within the last moment): ``busy_tolerance`` (queue delay at most half a
  baseline) instead of ``idle_tolerance``.

So an idle node gets as many writes as it absorbs without queueing, a busy
one keeps the queue a user-facing statement waits behind to a fraction of a
round trip, and a faster or slower machine (or a cluster) tunes itself. The
current limit is the gauge ``fanline_fanout_write_limit``.

Why not a library: the Python ports of concurrency-limits we looked at
(aioadaptive, ace-concurrency, aimd-limiter; all 0.x, single-maintainer) are
rate limiters or wrap whole HTTP clients, and none takes the "someone is
waiting" signal this needs; the algorithm is forty lines.

Slots are handed out first come, first served, so pages of different tweets
share the limit by arrival, not by size: a small page never waits behind the
whole of a large one, only behind the writes already queued (each page also
keeps at most its own window in flight, see ``write_all``).

Writes of a large fan-out's slices yield to every other write, and a page
with a budget is refused up front when it could not finish in it: see
``write_context.py``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from fanline_shared import metrics

from .write_context import PAGE_ADMIT_SHARE, PAGE_ROUNDS_SHARE, PageRefused, current_budget, is_bulk

T = TypeVar("T")


@dataclass(frozen=True)
class LimitPolicy:
    initial: int = 8
    minimum: int = 1
    maximum: int = 256
    busy_tolerance: float = 1.5
    idle_tolerance: float = 3.0
    backoff: float = 0.8
    # The baseline is the lowest latency of the last two windows of this length.
    baseline_window_s: float = 10.0
    # Latency below this never counts as queueing (timer and scheduling noise).
    slack_s: float = 0.002
    # Fewer of our writes than this estimated waiting never shrink the limit.
    queue_floor: float = 4.0
    # Writes within this share of the baseline (+ slack_s): no queue, grow fast.
    probe_share: float = 0.125
    # A write started with at most this many in flight (itself included) ran
    # unloaded; the median of the last ``probe_samples`` of them (no older
    # than ``baseline_window_s``) is the unloaded latency (see the probe).
    probe_in_flight: int = 2
    probe_samples: int = 6
    # Off by default (FANLINE_FANOUT_LIMIT_PROBE): measured in one round, the
    # probe bought ~11 % more fan-out for a post p99 with the fan-out running
    # of 103.7 ms against 59.9 (docs/operations.md, Background work).
    probe: bool = False


class AdaptiveLimit:
    def __init__(self, policy: LimitPolicy, busy: Callable[[], bool], clock: Callable[[], float] = time.monotonic) -> None:
        self._p = policy
        self._busy = busy
        self._clock = clock
        self.limit = float(policy.initial)
        self.in_flight = 0
        self.bulk_in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._bulk_waiters: deque[asyncio.Future[None]] = deque()
        self._min_now = float("inf")
        self._min_prev = float("inf")
        self._window_start = clock()
        self._last_decrease = float("-inf")
        # (when, latency) of the last writes that ran unloaded; probing: new
        # writes are held to ``probe_in_flight`` until enough have.
        self._unloaded: deque[tuple[float, float]] = deque(maxlen=policy.probe_samples)
        self.probing = False
        self._probe_taken = 0
        # Writes of admitted pages not yet done (queued or in flight), and a
        # moving average of write latency: the pace a new page would get.
        self.pending = 0
        self.latency: float | None = None
        metrics.FANOUT_WRITE_LIMIT.set(self.limit)

    @property
    def baseline(self) -> float:
        return min(self._min_now, self._min_prev)

    @property
    def cap(self) -> int:
        """Writes let in flight now: the limit, or ``probe_in_flight`` while probing."""
        return min(int(self.limit), self._p.probe_in_flight) if self.probing else int(self.limit)

    def unloaded(self, now: float) -> float | None:
        """The median latency of the recent writes that ran unloaded (None:
        too few younger than ``baseline_window_s``)."""
        fresh = sorted(rtt for when, rtt in self._unloaded if now - when <= self._p.baseline_window_s)
        if len(fresh) < max(1, self._p.probe_samples // 2):
            return None
        return fresh[len(fresh) // 2]

    def _bulk_room(self) -> bool:
        # Bulk writes never hold the last slot: an ordinary write that comes
        # while a large fan-out runs finds one free, or waits for one write.
        cap = self.cap
        return self.bulk_in_flight < max(1, cap - 1) and self.in_flight < cap

    async def acquire(self) -> bool:
        """Wait for a slot; returns whether it is a bulk one (pass it back to
        ``release``)."""
        bulk = is_bulk()
        if bulk:
            if not self._waiters and not self._bulk_waiters and self._bulk_room():
                self.in_flight += 1
                self.bulk_in_flight += 1
                return True
        elif self.in_flight < self.cap and not self._waiters:
            self.in_flight += 1
            return False
        queue = self._bulk_waiters if bulk else self._waiters
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._release_slot(bulk)  # granted as we were cancelled: give it back
            else:
                queue.remove(fut)
            raise
        return bulk

    def release(self, rtt_s: float | None, bulk: bool = False, depth: int | None = None) -> None:
        """Give a slot back; ``rtt_s`` is how long the write took (None: it
        failed — failures shrink the limit like slow writes), ``depth`` how
        many writes were in flight when it started, itself included."""
        self._observe(rtt_s, depth)
        self._release_slot(bulk)

    def _release_slot(self, bulk: bool) -> None:
        self.in_flight -= 1
        if bulk:
            self.bulk_in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.in_flight < self.cap:
            fut = self._waiters.popleft()
            if not fut.done():
                self.in_flight += 1
                fut.set_result(None)
        while self._bulk_waiters and not self._waiters and self._bulk_room():
            fut = self._bulk_waiters.popleft()
            if not fut.done():
                self.in_flight += 1
                self.bulk_in_flight += 1
                fut.set_result(None)

    def _observe(self, rtt_s: float | None, depth: int | None = None) -> None:
        now = self._clock()
        if now - self._window_start > self._p.baseline_window_s:
            self._min_prev, self._min_now, self._window_start = self._min_now, float("inf"), now
        if self._p.probe and rtt_s is not None and depth is not None and depth <= self._p.probe_in_flight:
            self._unloaded.append((now, rtt_s))
            if self.probing:
                self._probe_taken += 1
                if self._probe_taken >= self._p.probe_samples:
                    self.probing = False
        if rtt_s is not None:
            self._min_now = min(self._min_now, rtt_s)
            # One write counts for at most twice the average: a single stall (a
            # GC pause, a flush) moves it 10 %, a slowdown that lasts ~10 % a write.
            self.latency = rtt_s if self.latency is None else 0.9 * self.latency + 0.1 * min(rtt_s, 2 * self.latency)
        baseline = self.baseline if self.baseline != float("inf") else 0.0
        busy = self._busy()
        tolerance = self._p.busy_tolerance if busy else self._p.idle_tolerance
        latency = self.latency if self.latency is not None else 0.0
        # Vegas: how many of our writes are waiting somewhere, not being
        # served — against the unloaded latency when one was measured lately.
        unloaded = self.unloaded(now) if self._p.probe else None
        reference = max(baseline, unloaded) if unloaded is not None else baseline
        queued = self.in_flight * (1.0 - reference / latency) if latency > 0 else 0.0
        slow = rtt_s is None or (latency > baseline * tolerance + self._p.slack_s and queued >= self._p.queue_floor)
        if slow and rtt_s is not None and unloaded is None and self._p.probe:
            # Before shrinking for a queue judged against the best write of a
            # window: measure the unloaded latency (the module docstring).
            if not self.probing:
                self.probing, self._probe_taken = True, 0
                metrics.FANOUT_WRITE_LIMIT_PROBES.inc()
        elif slow:
            if now - self._last_decrease > max(baseline, 0.001):
                self.limit = max(float(self._p.minimum), self.limit * self._p.backoff)
                self._last_decrease = now
                cause = "failed" if rtt_s is None else "slow_busy" if busy else "slow_idle"
                metrics.FANOUT_WRITE_LIMIT_DECREASES.labels(cause).inc()
        elif self.in_flight * 2 >= self.limit:
            # Using the limit (at least half of it, as Netflix's AIMD counts)
            # and still fast: with no queue at all, one more per write (double
            # per round trip); past that, up to one more per round trip.
            no_queue = latency <= reference * (1.0 + self._p.probe_share) + self._p.slack_s
            step = 1.0 if no_queue else 1.0 / self.limit
            self.limit = min(float(self._p.maximum), self.limit + step)
        metrics.FANOUT_WRITE_LIMIT.set(self.limit)
        self._wake()

    async def run(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run one write under the limit, timing it."""
        bulk = await self.acquire()
        depth = self.in_flight
        started = self._clock()
        try:
            result = await call()
        except asyncio.CancelledError:
            # Given up on (the page's budget passed): no latency to learn from.
            self._release_slot(bulk)
            raise
        except BaseException:
            self.release(None, bulk)
            raise
        self.release(self._clock() - started, bulk, depth)
        return result

    def expected_s(self, requests: int) -> float:
        """Seconds until ``requests`` more writes would be done, behind the
        ones pending, at the current limit and latency (0 before any write
        was timed)."""
        if self.latency is None:
            return 0.0
        return (self.pending + requests) / max(1.0, self.limit) * self.latency

    def admit(self, requests: int) -> None:
        """Inside ``page_budget``: raise ``PageRefused`` if the writes pending
        here plus ``requests`` more would take more than ``PAGE_ADMIT_SHARE``
        of the budget at the current pace. Cheap: call it before building the
        writes (a refused page should cost next to nothing — refusals are
        most calls while a backlog drains, and grouping 1,000 rows by replica
        was two thirds of a replica's CPU when it ran before the refusal)."""
        budget = current_budget()
        # Never refused with nothing pending: the limit only grows while
        # writes run, so refusing the first page (a far Cassandra, a limit
        # still at its start) would refuse every page after it too. Before
        # any write was timed the pace is unknown: that first page is the
        # only one admitted (the worker's first pages used to be admitted all
        # at once, each with the narrow window of an unknown pace, and every
        # one of them expired half-written with Cassandra 0.4 s away).
        if budget is None or not requests or self.pending <= 0:
            return
        expected = self.expected_s(requests) if self.latency is not None else float("inf")
        if expected > budget * PAGE_ADMIT_SHARE:
            raise PageRefused(expected, budget)

    def page_window(self, requests: int, window: int, budget_s: float | None) -> int:
        """``window``, widened so that ``requests`` writes take at most
        ``PAGE_ROUNDS_SHARE`` of the budget in round trips (never past the
        limit). With 4 in flight a 1,000-row page is 25 round trips: past
        ~0.3 s to Cassandra it could never finish in its 8 s."""
        if budget_s is None or self.latency is None or requests <= window:
            return window
        rounds = max(1, int(budget_s * PAGE_ROUNDS_SHARE / max(self.latency, 1e-6)))
        return max(window, min(int(self.limit), -(-requests // rounds)))

    async def write_all(self, items: Iterable[T], write: Callable[[T], Awaitable[object]], window: int) -> None:
        """``write`` every item, at most ``window`` of them in flight for this
        call and each under the shared limit; the first failure stops the
        rest and propagates once the writes in flight settle.

        Inside ``page_budget``: refused with ``PageRefused`` before writing
        anything if the writes pending here plus these would take more than
        ``PAGE_ADMIT_SHARE`` of the budget at the current pace — so what is
        admitted finishes, and a backlog is refused at the door instead of
        every page starting and none finishing in time — and the window is
        widened by ``page_window``."""
        todo = list(items)
        self.admit(len(todo))
        budget = current_budget()
        window = self.page_window(len(todo), window, budget)
        queue = iter(todo)
        failed: list[BaseException] = []
        self.pending += len(todo)
        left = len(todo)

        async def worker() -> None:
            nonlocal left
            for item in queue:
                if failed:
                    return
                try:
                    await self.run(partial(write, item))
                except Exception as exc:  # noqa: BLE001 - re-raised below, after the others settle
                    failed.append(exc)
                    return
                finally:
                    left -= 1
                    self.pending -= 1

        try:
            await asyncio.gather(*(worker() for _ in range(max(1, window))))
        finally:
            self.pending -= left  # items never started (a failure, or cancelled)
        if failed:
            raise failed[0]
