"""The fan-out worker's composition root: a faust-streaming app.

Delivery guarantees, and the faust pitfalls they work around:

* ``concurrency=1`` per agent: faust can commit past an in-flight message with
  more (faust-streaming #606). Parallelism comes from ``OrderedPipeline``
  instead: up to ``FANLINE_FANOUT_BATCH`` events are processed at once, one
  lane per event key (author) in stream order, each started as soon as it
  arrives and a slot is free (no batch barrier: a slow event holds up only its
  own author). Acks are manual and go out in each partition's offset order,
  once an event and all before it are done, so an offset is committed only
  after its rows were written. faust's own acks of events the pipeline never
  finished (those it skips after a rebalance) and of fetch gaps are refused
  (``offsets.FinishedOnlyConsumer``). A crash redelivers from the first event not
  done; rows are keyed by ``(owner, tweet_id)``, so rewrites create no
  duplicates. (One event at a time left tweet-store idle between tweets:
  measured, one worker wrote half the bare-driver rate.)
* If an agent raises, faust acks the message and moves on (the event would be
  silently lost), so every event is handled inside ``process`` and never
  raises: transient errors (a peer or Cassandra unavailable, a peer's 503)
  are retried with backoff for as long as it takes — the partition waits,
  keeping per-author order — and an event that can never succeed (a peer's
  other 5xx, an unexpected error: ``FANLINE_FANOUT_MAX_ATTEMPTS`` tries) goes
  to the dead-letter topic with its error, so the partition keeps moving.
"""

from __future__ import annotations

import time
from typing import Any

import faust
import mode
from aiohttp import web
from faust.types import TP
from structlog.contextvars import bound_contextvars

from fanline_shared import events, metrics
from fanline_shared.clients.social_graph import SocialGraphClient
from fanline_shared.clients.tweet_store import TweetStoreClient
from fanline_shared.colocation import Hosting, Part
from fanline_shared.domain import OutboxEvent
from fanline_shared.errors import DomainError, Unavailable
from fanline_shared.http_server import after_startup
from fanline_shared.logs import (
    get_logger,
    kafka_headers,
    request_id_from_kafka,
)
from fanline_shared.outbox import AppliedAcks

from . import __version__
from .config import Settings
from .handlers import FanoutHandlers
from .offsets import FinishedOnlyTransport, JumpWatch, finished
from .pipeline import OrderedPipeline
from .processor import Processor

SERVICE = "fanout-worker"
# The services this composition root constructs peer clients for: its call
# paths. deploy/k8s/base/networkpolicy.yaml admits exactly these, and
# tests/ops/test_k8s.py derives the policies' callers from this list (and
# checks it against the clients this package constructs).
PEERS: tuple[str, ...] = ("social-graph", "tweet-store")
# Applied events are reported to their outbox's owner this often (embedded
# broker only); well inside the relay's 3 s before it republishes an event.
APPLIED_ACKS_INTERVAL_S = 0.2
log = get_logger(__name__)


class FanoutApp(faust.App):
    """faust's app, starting the stores it hosts (``hosting``) before its
    consumer and agents, and stopping them after."""

    hosting: Hosting | None = None
    _hosting_started = False
    fetch: tuple[int, int] = (1, 1500)  # (fetch_min_bytes, fetch_max_wait_ms), faust's until create_app sets the settings

    def _new_transport(self) -> Any:
        # As faust's (the brokers are always kafka://), with a consumer whose
        # acks count only for events the pipeline finished.
        return FinishedOnlyTransport(self.conf.broker_consumer, self)

    async def on_start(self) -> None:
        await super().on_start()
        if self.hosting is not None and not self._hosting_started:
            await self.hosting.start()  # before any agent runs: its first call finds them
            self._hosting_started = True

    async def on_started(self) -> None:
        await super().on_started()
        # As every HTTP service does after its start-up (http_server): the
        # driver's metadata, faust's and the hosted stores' objects are never
        # scanned by the GC again (the worker alone did not freeze them), and
        # its loop's stalls are measured and reported.
        after_startup()

    async def on_shutdown(self) -> None:
        await super().on_shutdown()
        if self.hosting is not None and self._hosting_started:
            await self.hosting.stop()
            self._hosting_started = False


def create_app(settings: Settings, hosted: list[Part] | None = None) -> faust.App:
    """The worker's faust app; ``hosted``: the stores it runs in its own process."""
    app = FanoutApp(
        settings.group_id,
        broker=";".join(f"kafka://{b.strip()}" for b in settings.kafka.bootstrap.split(",")),
        value_serializer="raw",
        key_serializer="raw",
        topic_partitions=settings.kafka.partitions,
        topic_replication_factor=settings.kafka.replication_factor,
        consumer_auto_offset_reset="earliest",  # events published before the first start count
        broker_commit_interval=settings.commit_interval_s,
        broker_session_timeout=settings.session_timeout_s,
        broker_rebalance_timeout=settings.rebalance_timeout_s,
        broker_heartbeat_interval=1.0,
        # On a rebalance, do not wait for the events in flight to be acked.
        # faust waits for every unacked message by default, and a page of a
        # far Cassandra takes seconds: with four workers joining, the wait
        # outlasted the rebalance timeout, the member was dropped
        # (UnknownMemberIdError 75 times in one worker's log, "Task timed
        # out" on every revoke) and rejoined into the next rebalance. Safe
        # here: every handler is idempotent, the new owner re-reads from the
        # committed offset, and the pipeline acks each partition strictly in
        # offset order — a late ack of offset X means every event up to X is
        # done, so committing it can only skip work already done.
        stream_wait_empty=False,
        producer_acks=-1,
        # TLS / SASL to the brokers, for its consumer and producer alike (engine_security).
        broker_credentials=settings.kafka.security.faust_credentials(),
        store="memory://",
        datadir=str(settings.data_dir / settings.group_id),
        web_enabled=True,
        web_bind=settings.http.host,
        web_port=settings.http.port,
        web_host=settings.http.host,
        version=1,
    )
    events_topic = app.topic(
        settings.kafka.events_topic, partitions=settings.kafka.partitions, key_serializer="raw", value_serializer="raw"
    )
    dead_letter = app.topic(
        settings.kafka.dlq_topic, partitions=settings.kafka.partitions, key_serializer="raw", value_serializer="raw"
    )
    chunks_topic = app.topic(
        settings.kafka.chunks_topic, partitions=settings.kafka.partitions, key_serializer="raw", value_serializer="raw"
    )

    async def publish_chunk(event: OutboxEvent) -> None:
        """Durable before the event that handed it on is acknowledged."""
        started = time.perf_counter()
        try:
            fut = await chunks_topic.send(key=event.key.encode(), value=event.payload, headers=kafka_headers(event.request_id))
            await fut
        except Exception as exc:
            metrics.KAFKA_PRODUCE_ERRORS.labels(type(exc).__name__).inc()
            raise Unavailable(f"chunks topic unavailable: {exc!r}") from exc
        metrics.KAFKA_PRODUCE_LATENCY.observe(time.perf_counter() - started)

    peers = settings.peers
    # Background work: never counted against the peers' admission limits.
    social = SocialGraphClient(SERVICE, peers.social_graph_url, peers.timeout_s, token=peers.internal_token, background=True)
    tweets = TweetStoreClient(SERVICE, peers.tweet_store_url, peers.timeout_s, token=peers.internal_token, background=True)
    handlers = FanoutHandlers(
        social,
        tweets,
        page_size=settings.follower_page_size,
        pages_in_flight=settings.pages_in_flight,
        large_account_followers=settings.large_account_followers,
        # With the in-memory embedded broker an event is acknowledged
        # to its outbox once applied, so a fan-out must finish inline:
        # a slice handed on to tansu would not outlive it.
        chunk_size=None if settings.kafka.ack_when_applied else settings.chunk_size,
        publish_chunk=publish_chunk,
    )
    processor = Processor(handlers, dead_letter, settings.max_unexpected_attempts)
    # FANLINE_OUTBOX_ACK=applied (the embedded default): tell each event's
    # owner once it is applied, so its outbox row outlives the in-memory broker.
    acks = AppliedAcks({"tweet-store": tweets, "social-graph": social}) if settings.kafka.ack_when_applied else None
    metrics.set_build_info(SERVICE, __version__)
    # Export the usual dead-letter reasons at 0 from the start: a counter that
    # first appears at 1 shows no increase() in Prometheus, so the first
    # dead letter after a restart would be invisible to dashboards and alerts.
    for reason in ("invalid_event", "error", "peer_failed"):
        metrics.DEAD_LETTERED.labels(reason)
    joined = {"group": False}
    # Consumers have been seen stuck after broker restarts: readiness fails
    # when there is lag but no event has been processed for a while.
    progress = {"last_event": time.monotonic(), "lag": 0.0}

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]
    async def on_assigned(_sender: Any, assigned: Any, **_: Any) -> None:
        joined["group"] = True

    async def handle(event: Any) -> None:
        message = event.message
        origin = {"topic": message.topic, "partition": str(message.partition), "offset": str(message.offset)}
        # The request that caused the event (its Kafka header): on every log
        # line of this event and every call it makes (tweet-store, social-graph);
        # and where the event is in its topic (an offset question is then one
        # grep of the log away).
        request_id = request_id_from_kafka(message.headers)
        rid = {"request_id": request_id} if request_id else {}
        with bound_contextvars(partition=message.partition, offset=message.offset, **rid):
            settled = await processor.process(event.key, event.value, origin)
        if acks is not None and settled is not None and not isinstance(settled, events.FanoutChunk):
            acks.applied(settled)
        progress["last_event"] = time.monotonic()

    async def consume(stream: Any, window: int) -> None:
        """Feed the stream through an ``OrderedPipeline`` with manual acks."""
        stream.enable_acks = False  # acked by the pipeline, in offset order (as take_events does)

        async def ack(event: Any) -> None:
            finished(event.message)  # the only acks FinishedOnlyConsumer counts
            await stream.ack(event)

        pipeline: OrderedPipeline[Any] = OrderedPipeline(
            handle, ack, key=lambda event: event.key, partition=lambda event: event.message.tp, window=window
        )
        jumps = JumpWatch()
        try:
            async for event in stream.events():
                jumps.saw(event.message)
                await pipeline.submit(event)
        finally:
            await pipeline.close()

    @app.agent(events_topic, concurrency=1)
    async def fanout(stream: Any) -> None:
        await consume(stream, settings.batch_size)

    # Slices of large fan-outs: an agent of their own, so they are written
    # beside the events of every other author, never in front of them.
    @app.agent(chunks_topic, concurrency=1)
    async def fanout_chunks(stream: Any) -> None:
        await consume(stream, settings.slices_in_flight)

    if acks is not None:

        @app.timer(interval=APPLIED_ACKS_INTERVAL_S)
        async def flush_applied_acks() -> None:
            await acks.flush()

    reported: set[tuple[str, str]] = set()  # lag series this replica exports

    @app.timer(interval=5.0)
    async def report_lag() -> None:
        consumer = app.consumer
        committed = getattr(consumer, "_committed_offset", {})
        total = 0.0
        current: set[tuple[str, str]] = set()
        for tp in consumer.assignment():
            if not isinstance(tp, TP) or tp.topic not in (settings.kafka.events_topic, settings.kafka.chunks_topic):
                continue
            high = consumer.highwater(tp)
            if high is None:
                continue
            done = committed.get(tp)
            lag = high - (done + 1 if done is not None else 0)
            labels = (tp.topic, str(tp.partition))
            metrics.CONSUMER_LAG.labels(*labels).set(max(0, lag))
            current.add(labels)
            total += max(0, lag)
        # A partition moved to another replica in a rebalance: stop exporting
        # its last value here, or sum() over replicas would count it twice.
        for labels in reported - current:
            metrics.CONSUMER_LAG.remove(*labels)
        reported.clear()
        reported.update(current)
        if total and not progress["lag"]:
            progress["last_event"] = time.monotonic()  # lag just appeared: start the clock now
        progress["lag"] = total

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        return web.json({"status": "ok", "service": SERVICE})

    @app.page("/readyz")
    async def readyz(web: Any, request: Any) -> Any:
        failing: dict[str, str] = {}
        for name, client in (("social-graph", social), ("tweet-store", tweets)):
            try:
                await client.call("GET", "/healthz", operation="healthz", policy=None)
            except DomainError as exc:
                failing[name] = exc.message
        if not joined["group"]:
            failing["kafka"] = "consumer group not joined yet"
        elif progress["lag"] and time.monotonic() - progress["last_event"] > settings.stuck_after_s:
            failing["kafka"] = f"consumer stuck: lag {progress['lag']:.0f} and no progress for {settings.stuck_after_s:.0f}s"
        if not app.consumer.assignment() and not failing:
            # Not necessarily an error (more replicas than partitions), but
            # this replica is doing nothing: say so.
            return web.json({"status": "ready", "service": SERVICE, "assigned_partitions": 0})
        if failing:
            names = ", ".join(sorted(failing))
            return web.json(
                {"error": {"code": "unavailable", "message": f"not ready: {names} unavailable"}, "dependencies": failing},
                status=503,
            )
        return web.json({"status": "ready", "service": SERVICE, "assigned_partitions": len(app.consumer.assignment())})

    @app.service
    class MetricsPort(mode.Service):  # type: ignore[misc]
        """``/metrics`` on the worker's metrics port (``FANLINE_WORKER_METRICS_PORT``),
        as every service serves it: never on the health port."""

        runner: web.AppRunner | None = None

        async def on_start(self) -> None:
            async def render(_: web.Request) -> web.Response:
                payload, content_type = metrics.render()
                return web.Response(body=payload, content_type=content_type.split(";")[0])

            server = web.Application()
            server.router.add_get("/metrics", render)
            self.runner = web.AppRunner(server, access_log=None)
            await self.runner.setup()
            await web.TCPSite(self.runner, settings.http.host, settings.http.metrics_port).start()

        async def on_stop(self) -> None:
            if self.runner is not None:
                await self.runner.cleanup()

    app.fanline_clients = (social, tweets)  # type: ignore[attr-defined]
    app.hosting = Hosting(hosted) if hosted else None
    app.fetch = (settings.fetch_min_bytes, settings.fetch_max_wait_ms)
    return app
