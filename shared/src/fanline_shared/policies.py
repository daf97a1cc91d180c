"""Named retry, timeout and consistency policies.

Retries are never hand-written loops in service code: callers pick a named
``RetryPolicy`` and call ``retry(policy, fn)``. Consistency levels are named
here too so every adapter agrees.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from .errors import Unavailable

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter.

    ``attempts`` is the total number of tries (None: until cancelled).
    """

    name: str
    attempts: int | None
    base_delay_s: float
    max_delay_s: float
    multiplier: float = 2.0

    def delay(self, attempt: int) -> float:
        """Delay before retry number ``attempt`` (1-based), with full jitter."""
        ceiling = min(self.max_delay_s, self.base_delay_s * self.multiplier ** (attempt - 1))
        return random.uniform(ceiling / 2, ceiling)


# A peer call inside a request: a couple of quick tries, then 503.
PEER_REQUEST = RetryPolicy("peer_request", attempts=3, base_delay_s=0.05, max_delay_s=0.3)
# The fan-out worker on a transient error: keep trying (the partition waits,
# which is right: the next event of this author must not overtake this one).
FANOUT_TRANSIENT = RetryPolicy("fanout_transient", attempts=None, base_delay_s=0.1, max_delay_s=10.0)
# Connecting to an engine at start-up.
STARTUP_CONNECT = RetryPolicy("startup_connect", attempts=60, base_delay_s=0.25, max_delay_s=2.0)
# Opening a SQLite file another process is switching to WAL (about 5 s in all).
SQLITE_WAL_SWITCH = RetryPolicy("sqlite_wal_switch", attempts=100, base_delay_s=0.02, max_delay_s=0.05)
# The outbox relay between sweeps when the broker is down.
RELAY_BACKOFF = RetryPolicy("relay_backoff", attempts=None, base_delay_s=0.5, max_delay_s=5.0)


@dataclass(frozen=True)
class RequestDeadline:
    """How long the gateway may work on one public request before it gives up
    and answers ``503`` with ``Retry-After: retry_after_s`` — so a stalled
    dependency (Cassandra paused, a storage service hung) is refused within
    a known time instead of holding the client until it comes back. Peer
    retries (``PEER_REQUEST``) happen inside the deadline, never past it."""

    name: str
    seconds: float
    retry_after_s: int = 1


# Reads, posts, follows, deletes: well above their p99 (tens of ms), well
# below a client's patience and Cassandra's own 10 s statement timeout.
GATEWAY_REQUEST = RequestDeadline("gateway_request", 2.0)
# Sign-up and login hash a password (argon2id, CPU-bound by design).
GATEWAY_PASSWORD_REQUEST = RequestDeadline("gateway_password_request", 5.0)


async def retry(
    policy: RetryPolicy,
    fn: Callable[[], Awaitable[T]],
    *,
    retry_on: tuple[type[BaseException], ...] = (Unavailable,),
    on_retry: Callable[[int, BaseException], None] | None = None,
) -> T:
    """Call ``fn`` until it succeeds, retrying ``retry_on`` errors per ``policy``."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return await fn()
        except retry_on as exc:
            if policy.attempts is not None and attempt >= policy.attempts:
                raise
            if on_retry is not None:
                on_retry(attempt, exc)
            delay = policy.delay(attempt)
            log.debug("%s: attempt %d failed (%s); retrying in %.2fs", policy.name, attempt, exc, delay)
            await asyncio.sleep(delay)


# Consistency: LOCAL_QUORUM for reads and writes (read-your-writes within a DC
# whatever the replication factor), LOCAL_SERIAL for lightweight transactions.
CONSISTENCY_READ = "LOCAL_QUORUM"
CONSISTENCY_WRITE = "LOCAL_QUORUM"
CONSISTENCY_SERIAL = "LOCAL_SERIAL"

# Home-timeline writes per in-flight window of the worker (bounded concurrency).
DEFAULT_FANOUT_CONCURRENCY = 128
# Fan-out pages one tweet-store process writes at once, whatever the number of
# workers calling it; further pages wait their turn. With the window below this
# bounds the writes it keeps queued at Cassandra, and so how long a post's or a
# read's statements wait behind fan-out on a busy node (Little's law).
# One page at a time: in bench runs of the post phase (posts while the worker
# drains a 10,000-follower backlog, 300 posts per column) two pages at a time
# gave post p99s of 40-66 ms and a gateway mean of 10.5-14 ms; one page, 31-41
# ms (one column 67) and 8.9-9.5 ms. The price: an author with few followers
# is one small page, and small pages of different authors are now written one
# after another (a round trip each) — raise this for many small authors.
DEFAULT_HOME_WRITE_CALLS = 1
# tweet-store's fan-out requests in flight per page when no one is waiting
# (see FanoutYield); each request is a batch of up to
# DEFAULT_HOME_WRITE_BATCH_ROWS rows. Small on purpose: one node takes its full
# write rate with a few dozen rows in flight, and every row beyond that is
# queue a post's or a read's statements wait behind when they arrive (Little's
# law). History, measured with the bench (post-latency phase, same node):
# single-row inserts 128 → 16 per page took a post's p99 under fan-out from
# 68-124 ms to 54-71 ms; then 32 single rows, one page at a time: 31-67 ms.
# Batches of 10 with 4 in flight (40 rows) and the busy pace below: post
# p50/p99 under fan-out 8.9/32 ms over 1,200 posts, against 13-16/41-55 ms
# for 32 single rows in the same week's runs.
DEFAULT_HOME_WRITE_WINDOW = 4
# While user-facing requests are served (see FanoutYield): one request in
# flight, paced to DEFAULT_HOME_WRITE_BUSY_ROWS_PER_S.
DEFAULT_HOME_WRITE_WINDOW_BUSY = 1
# Fan-out rows per request: tweet-store writes a page as unlogged batches of
# rows whose partitions share their first replica (cassandra.replica_batches):
# one request instead of ten cut tweet-store's CPU per fan-out row about
# fourfold in the bench (45-50 % of a core for ~2,500 rows/s before, 15-20 %
# for ~4,500). 10 is the node's default
# unlogged_batch_across_partitions_warn_threshold: one more and it warns on
# every batch. 1 writes single-row inserts.
DEFAULT_HOME_WRITE_BATCH_ROWS = 10
# How long after a user-facing request tweet-store stays in its busy mode.
# Short, because the busy pace is what caps delivery when posts are steady but
# sparse: at 0.5 s, two 1,000-follower posts a second kept tweet-store busy all
# the time and the lag grew without bound (p50 4.5 s after two minutes); at
# 0.1 s it settled at p50 0.19 s. The price: the fan-out runs unpaced in
# every gap of 0.1 s between user requests, so under the bench's overload it
# wrote ~25 % more rows and post p99 was 22-42 ms instead of 23-32 ms.
DEFAULT_FANOUT_YIELD_S = 0.1
# While busy, fan-out rows per second per tweet-store process (0: no cap). A
# window alone does not bound the fan-out's share of the machine: with cheap
# batched writes one request in flight still drives the node flat out.
DEFAULT_HOME_WRITE_BUSY_ROWS_PER_S = 2000.0


@dataclass(frozen=True)
class FanoutYield:
    """Fan-out writes yield to user-facing requests.

    A tweet-store process that served a user-facing request (a post, a read)
    within the last ``quiet_s`` keeps at most ``busy_window`` fan-out writes in
    flight per page, otherwise ``idle_window``. On a busy node every statement
    queues behind the writes in flight, so the busy window bounds how long a
    post or a read waits behind fan-out; when no one is posting or reading,
    a backlog drains at full speed. While busy the fan-out is also held to
    ``busy_rows_per_s`` (0: no cap). The price: under steady user traffic the
    fan-out runs at the busy pace (delivery lag grows first).
    """

    idle_window: int = DEFAULT_HOME_WRITE_WINDOW
    busy_window: int = DEFAULT_HOME_WRITE_WINDOW_BUSY
    quiet_s: float = DEFAULT_FANOUT_YIELD_S
    busy_rows_per_s: float = DEFAULT_HOME_WRITE_BUSY_ROWS_PER_S
