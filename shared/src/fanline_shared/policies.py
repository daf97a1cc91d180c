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

from .errors import Overloaded, Unavailable

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
    # A peer that shed the request (``Overloaded``) is retried only if this
    # is set: a request a person waits for gets the 503 at once instead of
    # adding its retries to the load that made the peer shed it.
    retry_overloaded: bool = True

    def delay(self, attempt: int) -> float:
        """Delay before retry number ``attempt`` (1-based), with full jitter."""
        ceiling = min(self.max_delay_s, self.base_delay_s * self.multiplier ** (attempt - 1))
        return random.uniform(ceiling / 2, ceiling)


# A peer call inside a request: a couple of quick tries, then 503.
PEER_REQUEST = RetryPolicy("peer_request", attempts=3, base_delay_s=0.05, max_delay_s=0.3, retry_overloaded=False)
# The fan-out worker on a transient error: keep trying (the partition waits,
# which is right: the next event of this author must not overtake this one).
FANOUT_TRANSIENT = RetryPolicy("fanout_transient", attempts=None, base_delay_s=0.1, max_delay_s=10.0)
# A fan-out page tweet-store refused (``Overloaded``: more queued there than
# the page's budget allows, or the budget passed): sent again on its own after
# a pause, so the event's other pages stay written and its followers are not
# read again; past the attempts the whole event is retried (FANOUT_TRANSIENT).
# Measured with 200 ms added to Cassandra: 1,614 whole events retried.
FANOUT_PAGE_SHED = RetryPolicy("fanout_page_shed", attempts=8, base_delay_s=0.25, max_delay_s=2.0)
# Connecting to an engine at start-up.
STARTUP_CONNECT = RetryPolicy("startup_connect", attempts=60, base_delay_s=0.25, max_delay_s=2.0)
# Opening a SQLite file another process is switching to WAL (about 5 s in all).
SQLITE_WAL_SWITCH = RetryPolicy("sqlite_wal_switch", attempts=100, base_delay_s=0.02, max_delay_s=0.05)
# The outbox relay between sweeps when the broker is down.
RELAY_BACKOFF = RetryPolicy("relay_backoff", attempts=None, base_delay_s=0.5, max_delay_s=5.0)
# How often the Cassandra driver tries a node it lost again (its
# ExponentialReconnectionPolicy; only base and max delay apply). The driver's
# default waits up to 600 s between attempts, so a service could answer 503
# for minutes after a stalled or restarted node is back (seen in the fault
# suite: 25 s); capped at 5 s, recovery follows the node within seconds.
CASSANDRA_RECONNECT = RetryPolicy("cassandra_reconnect", attempts=None, base_delay_s=0.5, max_delay_s=5.0)
# One schema statement at start-up (every migration is idempotent: IF NOT
# EXISTS). On a cluster that has just started, under load, a DDL statement can
# time out while the nodes flush and agree on the schema (seen in CI on the
# three-node cluster: "Connection defunct by heartbeat", and the service
# exited); it is tried again rather than failing the start.
MIGRATE_STATEMENT = RetryPolicy("migrate_statement", attempts=10, base_delay_s=1.0, max_delay_s=8.0)
# How long one schema statement may take before it is given up and tried
# again. Not the 10 s request timeout: on the three-node cluster of two shared
# cores, local runs of the cluster suite logged schema statements timing out at
# 10 s, migration after migration, while the nodes reported schema
# disagreement; each retry added DDL to the load that slowed it. A CI run on
# 2026-12-06 saw social-graph exit at start there (its log was not kept).
MIGRATE_DDL_TIMEOUT_S = 60.0
# How long start-up waits for the broker to describe the events topic with
# the partitions it was created with before it calls the topic too small (a
# misconfiguration it refuses to run with). A topic another process has just
# created can be described with some of its partitions only: on 2026-12-06 a
# CI run restarted the embedded default (tansu, which keeps topics in memory,
# so every service creates them again), and the fan-out worker was told
# fanline.events had 4 of its 8 partitions and exited.
TOPIC_METADATA_SETTLE_S = 15.0


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
# One fan-out page at tweet-store (``/internal/home/add`` and ``/remove``):
# queued and written within this, and within ``http_client.CALLER_BUDGET_SHARE`` of
# the timeout the worker sent; past it the rest is dropped, the answer is 503
# and the worker sends the page again later (rows are upserts, so a partly
# written page is harmless). Without it, pages the worker had timed out on
# stayed queued and were written anyway while their retries queued behind
# them: a benchmark run with 4 workers on 2 cores acknowledged no row for
# 7 minutes, each page answered after ~300 s.
FANOUT_PAGE = RequestDeadline("fanout_page", 8.0)


@dataclass(frozen=True)
class AdmissionPolicy:
    """Admission control of one service's HTTP requests (``admission.py``):
    at most ``max_in_flight`` requests are worked on at once; one that finds
    them all taken waits at most ``queue_deadline_s`` for a slot (and at most
    ``max_queue`` wait at a time), else it is refused at once with ``503
    unavailable`` and ``Retry-After: retry_after_s``. Past its capacity the
    service then sheds what it cannot serve instead of queueing it for
    minutes: the requests it accepts keep their latency, and a refused one
    is answered within the queue deadline. ``max_in_flight`` 0 turns it off.

    Health and metrics routes are never limited, nor are live streams
    (``exempt_prefixes``): a stream stays open for hours and has its own
    per-user cap."""

    name: str
    max_in_flight: int
    queue_deadline_s: float
    max_queue: int
    retry_after_s: int = 1
    # After a request was refused at its deadline, for this long a request
    # that finds every slot taken is refused at once instead of waiting: in a
    # sustained overload the queue only delays refusals it will make anyway
    # (measured: refusals waited the whole deadline, and longer as the event
    # loop fell behind). A short burst still queues.
    fast_refusal_s: float = 1.0
    exempt_paths: tuple[str, ...] = ("/healthz", "/readyz", "/metrics")
    exempt_prefixes: tuple[str, ...] = ()
    # Adaptive limit (``admission.LatencyLimit``): when ``latency_tolerance``
    # > 0, ``max_in_flight`` is only the ceiling. Every ``adapt_samples``
    # admitted requests, the ``latency_quantile`` of their time in the
    # service is compared with its lowest value of the last two
    # ``baseline_window_s`` windows (the latency without a queue): above
    # ``latency_tolerance`` x that + ``latency_slack_s``, the limit is
    # multiplied by ``backoff`` if at least half of it was in flight (else
    # the slowness is a dependency's, and fewer slots would not help); within
    # it, the limit grows by one — and it only shrinks when the requests in
    # flight x (1 - baseline / latency), Vegas' estimate of how many were
    # queued, is at least ``queue_floor``. Never below ``min_in_flight``. Why: a fixed limit of 48
    # let 90 % of twice this machine's capacity in (every accepted request
    # twice as slow, the fan-out 59 s behind): with the cores shared by the
    # engines, concurrency is not what runs out; latency shows what does.
    latency_tolerance: float = 0.0
    latency_quantile: float = 0.9
    latency_slack_s: float = 0.005
    adapt_samples: int = 32
    backoff: float = 0.9
    min_in_flight: int = 4
    queue_floor: float = 4.0
    baseline_window_s: float = 15.0
    # Requests whose time is not a sign of load (argon2 hashes a password
    # for tens of milliseconds by design): counted in flight, not sampled.
    unsampled: tuple[tuple[str, str], ...] = ()

    @property
    def enabled(self) -> bool:
        return self.max_in_flight > 0


# The gateway: each request awaits two or three peer calls, so a few dozen in
# flight keep both cores busy (Little's law: ~300 requests/s x ~0.1 s). A
# refused request waits at most 20 ms: every refusal within 100 ms even with
# the event loop behind (with 50 ms, the slowest of 9,501 refusals at twice
# the capacity took 113 ms). Streams are exempt (policy docstring).
GATEWAY_ADMISSION = AdmissionPolicy(
    "gateway_admission",
    max_in_flight=48,
    queue_deadline_s=0.02,
    max_queue=96,
    exempt_prefixes=("/v1/streaming/", "/api/v1/streaming", "/static/", "/openapi.json", "/avatars/", "/headers/"),
    # The edge adapts: its requests' time is every
    # service's time, so it sheds for all of them.
    latency_tolerance=2.0,
    unsampled=(("POST", "/v1/sessions"), ("POST", "/v1/users")),
)
# tweet-store's user-facing routes (the worker's background writes have their
# own adaptive limit, limiter.py, and are not counted here; nor is the outbox
# bookkeeping of the gateway's relay).
TWEET_STORE_ADMISSION = AdmissionPolicy(
    "tweet_store_admission", max_in_flight=48, queue_deadline_s=0.05, max_queue=96, exempt_prefixes=("/internal/outbox",)
)
# social-graph: sessions, follows, profiles (the worker pages followers in
# the background: not counted). Log-ins also have the argon2 budget.
SOCIAL_GRAPH_ADMISSION = AdmissionPolicy(
    "social_graph_admission", max_in_flight=64, queue_deadline_s=0.05, max_queue=128, exempt_prefixes=("/internal/outbox",)
)


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
            if isinstance(exc, Overloaded) and not policy.retry_overloaded:
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
# tweet-store's fan-out requests in flight per page (each a batch of up to
# DEFAULT_HOME_WRITE_BATCH_ROWS rows); all pages of a process share the
# adaptive limit of fanline_tweet_store.limiter, which decides how many are in
# flight in total. The per-page window keeps one large page from taking every
# slot: a small page of another tweet is written beside it, not after it.
DEFAULT_HOME_WRITE_WINDOW = 4
# Fan-out rows per request: tweet-store writes a page as unlogged batches of
# rows whose partitions share their first replica (cassandra.keyed_batches):
# one request instead of ten cut tweet-store's CPU per fan-out row about
# fourfold in the bench (45-50 % of a core for ~2,500 rows/s before, 15-20 %
# for ~4,500). 10 is the node's default
# unlogged_batch_across_partitions_warn_threshold: one more and it warns on
# every batch. 1 writes single-row inserts.
DEFAULT_HOME_WRITE_BATCH_ROWS = 10
# How long after a user-facing request tweet-store counts as busy: the
# adaptive fan-out limit then tolerates less queueing (limiter.LimitPolicy).
DEFAULT_FANOUT_YIELD_S = 0.1


@dataclass(frozen=True)
class FanoutYield:
    """Fan-out writes yield to user-facing requests.

    A tweet-store process that served a user-facing request (a post, a read)
    within the last ``quiet_s`` is *busy*: its adaptive fan-out limit
    (``fanline_tweet_store.limiter``) then tolerates less queueing at
    Cassandra.
    """

    quiet_s: float = DEFAULT_FANOUT_YIELD_S


@dataclass(frozen=True)
class ProducerBounds:
    """What the gateway's event producer (``kafka.EventPublisher``) may hold
    while the brokers fail. Every event it sends is already in its owner's
    outbox, so refusing one costs only latency (the relay publishes it a few
    seconds later), never the event; these bounds make refusing the default
    once the broker stops answering, instead of piling up work in the process.

    * ``circuit_open_s``: after a failed send, sends are refused this long
      without touching the broker (a small circuit breaker).
    * ``max_unacked``: events handed to the producer and not yet acknowledged
      or failed; past it sends are refused. An idempotent aiokafka producer
      never expires a batch (it retries until a leader takes it), so this is
      the only bound on its queue while a partition has no reachable leader.
    * ``close_s``: how long a replaced (or shutting-down) producer may flush
      before what it still holds is failed and it is stopped.
    * ``max_error_chars``: the last error kept for ``/readyz`` and the logs.
    """

    name: str
    circuit_open_s: float
    max_unacked: int
    close_s: float
    max_error_chars: int = 300


EVENT_PRODUCER = ProducerBounds("event_producer", circuit_open_s=2.0, max_unacked=2000, close_s=5.0)
