"""Every Prometheus metric of every Fanline service, declared once.

Names follow Prometheus conventions: base units, ``_seconds`` for durations,
``_total`` for counters, histograms for latencies. A service only exports the
metrics it touches, but all of them are defined here so dashboards and alerts
have one reference. When ``PROMETHEUS_MULTIPROC_DIR`` is set (several worker
processes of one service), ``render()`` aggregates across processes: counters
and histograms are summed, and each gauge says how its per-process values
combine (``multiprocess_mode``). prometheus_client's ``Info`` does not work in
multiprocess mode, so build info is a gauge with the conventional ``_info``
name and the value 1. tests/unit/test_metrics_multiprocess.py proves the
aggregation with real processes; docs/operations/monitor.md lists what each metric
feeds (dashboard panels and alerts).
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

# Latency buckets from 0.5 ms to 10 s: fine enough for Cassandra statements,
# wide enough for a 10,000-follower fan-out.
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
# Fan-out and delivery lag can take longer.
LONG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)

# Exposed as fanline_build_info{service, version} 1, exactly what an Info would
# give, but it survives multiprocess mode ("max": the same 1 in every process).
BUILD_INFO = Gauge(
    "fanline_build_info",
    "Build information of the running service",
    ["service", "version"],
    multiprocess_mode="max",
)

# --- HTTP (every service) ---------------------------------------------------
HTTP_REQUESTS = Counter("fanline_http_requests_total", "HTTP requests served", ["service", "method", "route", "status"])
HTTP_LATENCY = Histogram(
    "fanline_http_request_duration_seconds",
    "HTTP request latency",
    ["service", "method", "route"],
    buckets=LATENCY_BUCKETS,
)
# Admission control (admission.py): what each service refused past its capacity.
ADMISSION_SHED = Counter(
    "fanline_admission_shed_total",
    "Requests refused with 503 by admission control, by reason (queue_full, deadline, overloaded)",
    ["service", "route", "reason"],
)
ADMISSION_LIMIT = Gauge(
    "fanline_admission_limit",
    "Requests admission control lets in flight now (adaptive at the gateway: admission.LatencyLimit)",
    ["service"],
    multiprocess_mode="livemax",
)
ADMISSION_IN_FLIGHT = Gauge(
    "fanline_admission_in_flight",
    "Requests admitted and not yet answered (streams and operations not counted)",
    ["service"],
    multiprocess_mode="livesum",
)
ADMISSION_WAITING = Gauge(
    "fanline_admission_waiting",
    "Requests waiting for an admission slot now",
    ["service"],
    multiprocess_mode="livesum",
)
# Waits are bounded by the queue deadline (tens of ms): finer buckets.
ADMISSION_QUEUE_WAIT = Histogram(
    "fanline_admission_queue_wait_seconds",
    "Time a request waited for an admission slot, by outcome (admitted, shed)",
    ["service", "outcome"],
    buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0),
)
PEER_LATENCY = Histogram(
    "fanline_peer_request_duration_seconds",
    "Latency of calls to another Fanline service",
    ["service", "peer", "operation"],
    buckets=LATENCY_BUCKETS,
)
PEER_ERRORS = Counter("fanline_peer_errors_total", "Failed calls to another Fanline service", ["service", "peer", "operation"])

# --- the process's event loop (stalls.py) ---------------------------------------
# How late each 100 ms heartbeat of the loop ran: the wait every request on the loop pays.
EVENT_LOOP_LAG = Histogram(
    "fanline_event_loop_lag_seconds",
    "How late the event loop's heartbeat ran (a stall of the loop delays every request in flight)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
_GC_PAUSE = Histogram(
    "fanline_gc_pause_seconds",
    "Duration of the older generations' garbage collections (each holds the whole process)",
    ["generation"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
GC_PAUSE = {generation: _GC_PAUSE.labels(str(generation)) for generation in (1, 2)}  # bound once: observed in gc's callback

# --- domain -----------------------------------------------------------------
TWEETS_POSTED = Counter("fanline_tweets_posted_total", "Tweets accepted (201) by the gateway")
TWEETS_DELETED = Counter("fanline_tweets_deleted_total", "Tweets deleted")
USERS_CREATED = Counter("fanline_users_created_total", "Users signed up")
LOGINS = Counter("fanline_logins_total", "Log-in attempts by outcome", ["outcome"])

# --- fan-out worker ---------------------------------------------------------
EVENTS_CONSUMED = Counter("fanline_events_consumed_total", "Events consumed by the fan-out worker", ["type", "outcome"])
TIMELINE_ROWS_WRITTEN = Counter("fanline_timeline_rows_written_total", "Home-timeline rows written")
TIMELINE_ROWS_REMOVED = Counter("fanline_timeline_rows_removed_total", "Home-timeline rows removed")
FANOUT_DURATION = Histogram("fanline_fanout_duration_seconds", "Time to process one event", ["type"], buckets=LONG_BUCKETS)
FANOUT_PAGE_DURATION = Histogram(
    "fanline_fanout_page_duration_seconds",
    "Time to write one page of followers' timeline rows",
    buckets=LATENCY_BUCKETS,
)
DELIVERY_LAG = Histogram(
    "fanline_delivery_lag_seconds",
    "Tweet created until every home-timeline row of it is written",
    buckets=LONG_BUCKETS,
)
# Set by each worker replica for the partitions it owns right now (a partition
# it lost in a rebalance is removed, so sum() over replicas does not count twice).
CONSUMER_LAG = Gauge(
    "fanline_consumer_lag_messages",
    "Messages behind the log end, per partition",
    ["topic", "partition"],
    multiprocess_mode="livemax",
)
FANOUT_SKIPPED_LARGE = Counter(
    "fanline_fanout_skipped_large_total",
    "Tweets of large accounts not fanned out on write (merged into home timelines at read time)",
)
FANOUT_CHUNKS = Counter(
    "fanline_fanout_chunks_total",
    "Slices of large fan-outs handed on to the chunks topic",
)
# Acks the fan-out worker's consumer refused to count (fanline_fanout.offsets):
# "unfinished", faust acking an event the pipeline never finished (one it
# skipped after a rebalance); "gap", offsets faust would have counted as done
# because a fetch jumped past them. Either would have committed past events
# nobody processed; each is processed after the next rebalance or restart.
OFFSETS_NOT_COMMITTED = Counter(
    "fanline_fanout_offsets_not_committed_total",
    "Offsets faust would have committed without the pipeline finishing them, refused",
    ["reason"],
)
EVENT_RETRIES = Counter("fanline_event_retries_total", "Transient failures retried", ["type"])
DEAD_LETTERED = Counter("fanline_events_dead_lettered_total", "Events sent to the dead-letter topic", ["reason"])

# --- storage and messaging ---------------------------------------------------
CASSANDRA_LATENCY = Histogram(
    "fanline_cassandra_statement_duration_seconds",
    "Cassandra statement latency",
    ["statement"],
    buckets=LATENCY_BUCKETS,
)
CASSANDRA_ERRORS = Counter("fanline_cassandra_statement_errors_total", "Cassandra statement errors", ["statement", "error"])
SQLITE_LATENCY = Histogram(
    "fanline_sqlite_operation_duration_seconds",
    "Embedded SQLite operation latency",
    ["operation"],
    buckets=LATENCY_BUCKETS,
)
KAFKA_PRODUCE_LATENCY = Histogram(
    "fanline_kafka_produce_duration_seconds",
    "Kafka produce latency (until acknowledged)",
    buckets=LATENCY_BUCKETS,
)
KAFKA_PRODUCE_ERRORS = Counter("fanline_kafka_produce_errors_total", "Kafka produce failures", ["error"])
KAFKA_PRODUCER_UNACKED = Gauge(
    "fanline_kafka_producer_unacked",
    "Events the gateway's producer holds unacknowledged (bounded by policies.EVENT_PRODUCER.max_unacked)",
    multiprocess_mode="livesum",
)
# --- cluster nodes, as the clients see them (docs/operations/monitor.md, "Cluster nodes") ----
# No Cassandra or Kafka exporter is needed for these: the driver's and the
# producer's own view of the nodes, refreshed by their metadata.
CASSANDRA_NODE_UP = Gauge(
    "fanline_cassandra_node_up",
    "Cassandra node up (1) or down (0), as this process's driver sees it",
    ["node"],
    multiprocess_mode="livemin",
)
KAFKA_BROKERS_LIVE = Gauge(
    "fanline_kafka_brokers_live",
    "Live brokers in the producer's cluster metadata",
    multiprocess_mode="livemin",
)
KAFKA_PARTITION_LEADERS = Gauge(
    "fanline_kafka_partition_leaders",
    "Events-topic partitions each broker leads (producer metadata)",
    ["broker"],
    multiprocess_mode="livemax",
)
KAFKA_UNDER_REPLICATED = Gauge(
    "fanline_kafka_partitions_under_replicated",
    "Events-topic partitions with fewer in-sync replicas than replicas, or no leader (producer metadata)",
    multiprocess_mode="livemax",
)
KAFKA_UNDER_MIN_ISR = Gauge(
    "fanline_kafka_partitions_under_min_isr",
    "Events-topic partitions with fewer in-sync replicas than min.insync.replicas, or no leader: "
    "acks=all sends to them fail (producer metadata)",
    multiprocess_mode="livemax",
)
TWEET_CACHE_LOOKUPS = Counter(
    "fanline_tweet_cache_lookups_total", "Tweets looked up in tweet-store's hydration cache, by result", ["result"]
)
SESSION_CACHE_LOOKUPS = Counter(
    "fanline_session_cache_lookups_total",
    "Token verifications at the gateway, by result (hit: reused; miss: asked social-graph; off: not serving)",
    ["result"],
)
# --- home timelines: hybrid read and cap (tweet-store) --------------------------
HOME_MERGED_ACCOUNTS = Histogram(
    "fanline_home_merged_accounts",
    "Followed large accounts merged into one home-timeline read",
    buckets=(0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
)
HOME_MERGE_LOOKUPS = Counter(
    "fanline_home_merge_lookups_total",
    "Large accounts' recent tweets looked up for a home read, by result (hit: from the cached head)",
    ["result"],
)
HOME_FALLBACK_READS = Counter(
    "fanline_home_fallback_reads_total",
    "Home-timeline pages read past the stored horizon, from the followed accounts' userlines",
)
HOME_REGENERATIONS = Counter(
    "fanline_home_regenerations_total", "Home timelines regenerated for returning users, by outcome", ["outcome"]
)
HOME_REGENERATION_DURATION = Histogram(
    "fanline_home_regeneration_duration_seconds",
    "Time to regenerate one home timeline",
    buckets=LONG_BUCKETS,
)
FANOUT_WRITE_LIMIT = Gauge(
    "fanline_fanout_write_limit",
    "Fan-out writes tweet-store lets in flight now (adaptive, limiter.py)",
    multiprocess_mode="livemax",
)
FANOUT_WRITE_LIMIT_DECREASES = Counter(
    "fanline_fanout_write_limit_decreases_total",
    "Times tweet-store's fan-out write limit shrank, by cause: writes slow while users were served (busy), "
    "slow while idle, or a write that failed",
    ["cause"],
)
FANOUT_WRITE_LIMIT_PROBES = Counter(
    "fanline_fanout_write_limit_probes_total",
    "Times tweet-store held its fan-out writes to a few in flight to re-measure their unloaded latency "
    "before shrinking the limit (limiter.py)",
)
FANOUT_PAGES_EXPIRED = Counter(
    "fanline_fanout_pages_expired_total",
    "Fan-out pages tweet-store did not write within the caller's budget (503; the worker sends them again), "
    "by outcome: refused before starting (too much queued) or expired part-written",
    ["route", "outcome"],
)
HOME_TRIMS = Counter("fanline_home_trims_total", "Home timelines trimmed to the stored cap, by outcome", ["outcome"])
OUTBOX_PENDING = Gauge(
    "fanline_outbox_pending_events",
    "Outbox events seen pending by the relay",
    ["source"],
    multiprocess_mode="livemax",
)
OUTBOX_OLDEST_AGE = Gauge(
    "fanline_outbox_oldest_pending_seconds",
    "Age of the oldest unpublished outbox event the relay found at its last sweep (0: none)",
    ["source"],
    multiprocess_mode="livemax",
)
OUTBOX_RELAY_ACTIVE = Gauge(
    "fanline_outbox_relay_active",
    "1 while this gateway's relay holds the source outbox's lease (the one replica that sweeps it)",
    ["source"],
    multiprocess_mode="livesum",
)
OUTBOX_RELAYED = Counter("fanline_outbox_relayed_total", "Outbox events published by the relay (not the fast path)", ["source"])

# --- live streams (gateway) -----------------------------------------------------
STREAMS_OPEN = Gauge(
    "fanline_streams_open",
    "Server-sent event streams open on this gateway, by kind (home, public)",
    ["kind"],
    multiprocess_mode="livesum",
)
STREAM_UPDATE_LATENCY = Histogram(
    "fanline_stream_update_latency_seconds",
    "Tweet created until its update event is handed to a connected stream",
    buckets=LONG_BUCKETS,
)
STREAM_EVENTS = Counter("fanline_stream_events_total", "Events sent on streams", ["kind", "event"])
INTERNAL_AUTH_FAILURES = Counter(
    "fanline_internal_auth_failures_total",
    "Requests to /internal refused for a missing or wrong service credential",
    ["service"],
)
RATE_LIMITED = Counter("fanline_rate_limited_total", "Requests answered 429 by the gateway's abuse limits", ["limit"])
ARGON2_REFUSED = Counter(
    "fanline_argon2_refused_total", "Password hashes refused (503) because the argon2 memory budget was in use"
)
ARGON2_IN_USE = Gauge(
    "fanline_argon2_in_use", "argon2 hashes running now (each holds its memory cost)", multiprocess_mode="livesum"
)
FORGED_EVENTS = Counter(
    "fanline_events_forged_total",
    "Events dropped by the fan-out worker because they disagree with the stored state (e.g. author)",
    ["type"],
)


def render() -> tuple[bytes, str]:
    """The exposition text for /metrics, aggregated across processes if needed."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST


def set_build_info(service: str, version: str) -> None:
    BUILD_INFO.labels(service, version).set(1)
