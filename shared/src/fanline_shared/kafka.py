"""Kafka: the gateway's event publisher and the broker-health gauges it
exports. Topic creation is ``kafka_admin`` (re-exported here: ``ensure_topics``,
``ensure_topics_report``, ``topic_configs``, ``min_insync_replicas``).

The publisher never blocks start-up on the broker: if Kafka is down the
service still starts, ``/readyz`` names Kafka, and events wait in the owning
service's outbox until the relay publishes them.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, KafkaTimeoutError

from . import metrics
from .config import KafkaSettings
from .domain import OutboxEvent
from .errors import Unavailable
from .kafka_admin import ensure_topics, ensure_topics_report, min_insync_replicas, topic_configs
from .logs import kafka_headers
from .policies import EVENT_PRODUCER, ProducerBounds

__all__ = [
    "EventPublisher",
    "PartitionHealth",
    "ensure_topics",
    "ensure_topics_report",
    "min_insync_replicas",
    "partition_health",
    "topic_configs",
]

log = logging.getLogger(__name__)

CLUSTER_GAUGES_EVERY_S = 5.0
# How old the producer's cluster metadata may get (aiokafka's default is 5
# minutes): the broker gauges below come from it, so a broker that left or
# came back shows within this, not five minutes later. One small metadata
# request per gateway every 30 s.
METADATA_MAX_AGE_MS = 30_000
# Ids of events delivered lately that a repeated hand-over is answered from (see EventPublisher._pending).
DELIVERED_IDS_KEPT = 20_000


@dataclass(frozen=True)
class PartitionHealth:
    """One topic's partitions as a metadata snapshot has them."""

    led: dict[int, int]  # live broker -> partitions it leads
    under_replicated: int  # fewer in-sync replicas than replicas, or no leader
    under_min_isr: int  # fewer in-sync replicas than min.insync.replicas, or no leader: acks=all sends fail


def partition_health(partitions: Iterable[Any], live_brokers: Iterable[int], min_isr: int) -> PartitionHealth:
    """Count leaders and short ISRs of ``partitions`` (aiokafka's
    ``PartitionMetadata``: ``leader``, ``replicas``, ``isr``)."""
    led = dict.fromkeys(live_brokers, 0)
    under = short = 0
    for meta in partitions:
        leaderless = meta.leader < 0
        if meta.leader in led:
            led[meta.leader] += 1
        if leaderless or len(meta.isr) < len(meta.replicas):
            under += 1
        if leaderless or len(meta.isr) < min_isr:
            short += 1
    return PartitionHealth(led, under, short)


class EventPublisher:
    """Publishes outbox events to the events topic.

    ``publish`` returns False instead of raising when the broker is
    unavailable: callers keep the event in the outbox for the relay. What the
    publisher may hold meanwhile is bounded by a ``ProducerBounds`` policy
    (``policies.EVENT_PRODUCER``): a circuit breaker after a failure, a cap on
    unacknowledged events, and a producer kept across retriable failures
    rather than replaced on each one.
    """

    def __init__(self, settings: KafkaSettings, bounds: ProducerBounds = EVENT_PRODUCER) -> None:
        self._settings = settings
        self._bounds = bounds
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()
        # The broker's own error, as the root cause for /readyz and the logs;
        # never an ``Unavailable`` raised here about it (each would quote the
        # last one, and the text doubled with every refused send -- 17.8 GB).
        self._cause: str = "not connected yet"
        # After a failure, sends are refused until then (the circuit is open).
        self._retry_at = 0.0
        # Since when sends have failed without a success in between (None: the last one worked).
        self._unacked = 0
        self._gauges_at = 0.0
        self._brokers_seen: set[int] = set()
        # Outbox events the producer holds, by id, and the ids it delivered
        # lately: the relay hands the same event over again after a timeout
        # (it is still in the outbox), and a kept producer would then deliver
        # both copies once the broker answers -- two or three of every event
        # after an outage (tests/e2e/test_relay_leader.py). A repeat waits on
        # the first send instead, or is done at once if it was delivered.
        self._pending: dict[uuid.UUID, asyncio.Future[Any]] = {}
        self._delivered: OrderedDict[uuid.UUID, None] = OrderedDict()

    @property
    def last_error(self) -> str:
        """Why the last send or connect failed (bounded text)."""
        return self._cause

    @property
    def unacked(self) -> int:
        """Events handed to the producer and neither acknowledged nor failed yet."""
        return self._unacked

    def _admit(self) -> None:
        """Raise ``Unavailable`` while the circuit is open or the producer holds
        ``max_unacked`` events: the caller leaves the event to the relay."""
        if time.monotonic() < self._retry_at:
            raise Unavailable(f"kafka unavailable: {self._cause}")
        if self._unacked >= self._bounds.max_unacked:
            raise Unavailable(
                f"kafka producer holds {self._unacked} unacknowledged events; "
                f"refusing more until the broker answers ({self._cause})"
            )

    async def _ensure(self) -> AIOKafkaProducer:
        if self._producer is not None:
            return self._producer
        async with self._lock:
            if self._producer is not None:
                return self._producer
            self._admit()
            producer = AIOKafkaProducer(
                bootstrap_servers=self._settings.bootstrap,
                enable_idempotence=self._settings.idempotence,
                acks="all",
                linger_ms=0,
                request_timeout_ms=int(self._settings.request_timeout_s * 1000),
                **self._settings.security.client_kwargs(),  # TLS / SASL (engine_security)
                metadata_max_age_ms=METADATA_MAX_AGE_MS,
            )
            try:
                await asyncio.wait_for(producer.start(), self._settings.request_timeout_s)
            except (TimeoutError, KafkaError, OSError) as exc:
                await self._stop(producer)
                self._remember(exc)
                raise Unavailable(f"kafka unavailable: {self._cause}") from None
            self._producer = producer
            return producer

    def _track(self, event: OutboxEvent, future: asyncio.Future[Any]) -> None:
        """Count an event the producer now holds until its future settles."""
        self._unacked += 1
        metrics.KAFKA_PRODUCER_UNACKED.set(self._unacked)
        self._pending[event.id] = future

        def settled(f: asyncio.Future[Any]) -> None:
            self._unacked -= 1
            metrics.KAFKA_PRODUCER_UNACKED.set(self._unacked)
            if self._pending.get(event.id) is f:
                del self._pending[event.id]
            if not f.cancelled() and f.exception() is None:  # (retrieved: no "never retrieved" log)
                self._delivered[event.id] = None
                while len(self._delivered) > DELIVERED_IDS_KEPT:
                    self._delivered.popitem(last=False)

        future.add_done_callback(settled)

    async def _send(self, producer: AIOKafkaProducer, event: OutboxEvent) -> asyncio.Future[Any]:
        """Hand one event to the producer; its future settles on the broker's
        answer. An event it holds already, or delivered lately, is not sent
        again (see ``_pending``)."""
        if event.id in self._delivered:
            done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        pending = self._pending.get(event.id)
        if pending is not None:
            return pending
        future: asyncio.Future[Any] = await producer.send(
            self._settings.events_topic, event.payload, key=event.key.encode(), headers=kafka_headers(event.request_id)
        )
        self._track(event, future)
        return future

    def _remember(self, exc: BaseException) -> None:
        """Keep the broker's error (bounded) and open the circuit."""
        self._cause = repr(exc)[: self._bounds.max_error_chars]
        self._retry_at = time.monotonic() + self._bounds.circuit_open_s

    def _failed(self, exc: BaseException) -> None:
        """Count a failed send; remember it unless it was refused here (an
        ``Unavailable`` from ``_admit``/``_ensure``, whose cause is already
        kept: re-opening the circuit on every refusal would keep it open for
        as long as requests arrive)."""
        metrics.KAFKA_PRODUCE_ERRORS.labels(type(exc).__name__).inc()
        if not isinstance(exc, Unavailable):
            self._remember(exc)

    def _succeeded(self, producer: AIOKafkaProducer, started: float) -> None:
        metrics.KAFKA_PRODUCE_LATENCY.observe(time.perf_counter() - started)
        self._observe_cluster(producer)

    async def _after_failure(self, exc: BaseException) -> None:
        """A send failed or was not acknowledged in time: the caller reports
        the event as not published (it stays in the outbox for the relay), so
        the producer must not deliver it later -- with two gateways, the one
        holding a post's first send and the relay's leader would each put a
        copy on the topic (tests/e2e/test_relay_leader.py). So the producer is
        discarded, what it holds failed, never flushed; the circuit breaker
        (``circuit_open_s``) keeps that to one producer per window. A refusal
        here (``Unavailable``: the circuit, the cap) touches nothing."""
        self._failed(exc)
        if self._producer is not None and not isinstance(exc, Unavailable):
            # What the producer last knew of the brokers: a partition below
            # min.insync.replicas fails every send, so only a failure shows it.
            self._observe_cluster(self._producer, force=True)
            log.warning("discarding the Kafka producer after %s", self._cause)
            await self._reset(flush=False)

    async def publish(self, event: OutboxEvent) -> bool:
        """Send one event and wait (``FANLINE_KAFKA_TIMEOUT_S``) for the
        broker's acknowledgement; False if refused, failed or timed out -- the
        producer may still deliver it later, and the relay publishes it from
        the outbox anyway (the worker is idempotent)."""
        started = time.perf_counter()
        try:
            self._admit()
            producer = await self._ensure()
            deadline = time.monotonic() + self._settings.request_timeout_s
            future = await asyncio.wait_for(self._send(producer, event), self._settings.request_timeout_s)
            # shield: giving up waiting must not cancel the event inside the producer,
            # which still counts it until the broker answers.
            await asyncio.wait_for(asyncio.shield(future), max(0.0, deadline - time.monotonic()))
        except (TimeoutError, Unavailable, KafkaError, OSError) as exc:
            await self._after_failure(exc)
            return False
        self._succeeded(producer, started)
        return True

    def _observe_cluster(self, producer: AIOKafkaProducer, force: bool = False) -> None:
        """Export the brokers' health as this producer's metadata has it (at most
        every ``CLUSTER_GAUGES_EVERY_S`` unless ``force``): live brokers,
        events-topic partitions led per broker (0 for a broker seen before and
        gone now), partitions under-replicated or without a leader, and
        partitions with fewer in-sync replicas than the ``min.insync.replicas``
        Fanline creates its topics with (``topic_configs``). The metadata
        refreshes on any produce error and every ``METADATA_MAX_AGE_MS``."""
        now = time.monotonic()
        if now < self._gauges_at and not force:
            return
        self._gauges_at = now + CLUSTER_GAUGES_EVERY_S
        cluster = producer.client.cluster
        brokers = {b.nodeId for b in cluster.brokers()}
        partitions: dict[int, Any] = getattr(cluster, "_partitions", {}).get(self._settings.events_topic, {})
        health = partition_health(partitions.values(), brokers, min_insync_replicas(self._settings.replication_factor))
        metrics.KAFKA_BROKERS_LIVE.set(len(brokers))
        self._brokers_seen |= brokers
        for broker in self._brokers_seen:
            metrics.KAFKA_PARTITION_LEADERS.labels(str(broker)).set(health.led.get(broker, 0))
        metrics.KAFKA_UNDER_REPLICATED.set(health.under_replicated)
        metrics.KAFKA_UNDER_MIN_ISR.set(health.under_min_isr)

    async def publish_many(self, events: list[OutboxEvent]) -> list[OutboxEvent]:
        """Send a batch; return the events the broker acknowledged within
        ``FANLINE_KAFKA_TIMEOUT_S`` (one deadline for the whole batch). At most
        the room left under ``max_unacked`` is sent; the rest stays pending."""
        if not events:
            return []
        started = time.perf_counter()
        try:
            self._admit()
            producer = await self._ensure()
        except Unavailable:
            return []
        batch = events[: self._bounds.max_unacked - self._unacked]
        sent: list[tuple[OutboxEvent, asyncio.Future[Any]]] = []
        error: BaseException | None = None

        async def hand_over() -> None:
            for event in batch:
                sent.append((event, await self._send(producer, event)))

        deadline = time.monotonic() + self._settings.request_timeout_s
        try:
            await asyncio.wait_for(hand_over(), self._settings.request_timeout_s)
        except (TimeoutError, KafkaError, OSError) as exc:
            error = exc
        if sent:
            await asyncio.wait([f for _, f in sent], timeout=max(0.0, deadline - time.monotonic()))
        done = [event for event, f in sent if f.done() and not f.cancelled() and f.exception() is None]
        if len(done) < len(batch):
            if error is None:
                failures = [f.exception() for _, f in sent if f.done() and not f.cancelled()]
                error = next((e for e in failures if e is not None), None) or TimeoutError(
                    f"{len(batch) - len(done)} of {len(batch)} events not acknowledged in time"
                )
            await self._after_failure(error)
        if done:
            self._succeeded(producer, started)
        return done

    async def ping(self) -> None:
        """Raise ``Unavailable`` unless a producer is connected (or can be), a
        broker answers a metadata request now (the producer's cached metadata
        would hide an outage) and the events topic has partitions."""
        producer = await self._ensure()
        try:
            await asyncio.wait_for(producer.client.fetch_all_metadata(), 3.0)
            await asyncio.wait_for(producer.partitions_for(self._settings.events_topic), 3.0)
        except (TimeoutError, KafkaError, OSError) as exc:
            raise Unavailable(f"kafka unavailable: {repr(exc)[: self._bounds.max_error_chars]}") from None

    async def _reset(self, *, flush: bool = True) -> None:
        async with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            await self._stop(producer, flush=flush)

    async def _stop(self, producer: AIOKafkaProducer, *, flush: bool = True) -> None:
        """Stop a producer within about ``2 * close_s``. ``stop()`` first waits
        for everything queued to be delivered, which an idempotent producer
        retries until a leader answers -- forever while none does; so what is
        still queued after ``close_s`` (at once without ``flush``: a discarded
        producer) is failed first (each event is in the outbox, which the
        relay publishes)."""
        try:
            if not flush:
                raise TimeoutError("discarded")
            await asyncio.wait_for(producer.flush(), self._bounds.close_s)
        except (TimeoutError, KafkaError, OSError):
            # aiokafka has no public "close now"; its accumulator's fail_all is what
            # the producer itself calls when its sender dies.
            accumulator = getattr(producer, "_message_accumulator", None)
            if accumulator is not None:
                accumulator.fail_all(KafkaTimeoutError("producer closed before the broker acknowledged"))
        try:
            await asyncio.wait_for(producer.stop(), self._bounds.close_s)
        except Exception as exc:  # noqa: BLE001 - a producer being dropped may fail to close
            log.warning("stopping a Kafka producer: %r", exc)

    async def close(self) -> None:
        await self._reset()
