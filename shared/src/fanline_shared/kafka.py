"""Kafka: explicit topic creation and the gateway's event publisher.

Topics are created here with a configured partition count and never
auto-created (auto-created topics get one partition, which caps the number of
useful fan-out workers at one).

The publisher never blocks start-up on the broker: if Kafka is down the
service still starts, ``/readyz`` names Kafka, and events wait in the owning
service's outbox until the relay publishes them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from . import metrics
from .config import KafkaSettings
from .domain import OutboxEvent
from .errors import Unavailable
from .logs import kafka_headers

log = logging.getLogger(__name__)

CIRCUIT_OPEN_S = 2.0
CLUSTER_GAUGES_EVERY_S = 5.0


async def ensure_topics(settings: KafkaSettings, timeout_s: float = 30.0) -> dict[str, int]:
    """Create the events, dead-letter and fan-out chunks topics if missing; return partition
    counts. Raise ``Unavailable`` if the broker does not answer, and
    ``RuntimeError`` if an existing events topic has fewer partitions than
    configured (operators must add partitions deliberately)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap, request_timeout_ms=int(timeout_s * 1000))
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
    except (TimeoutError, KafkaError, OSError) as exc:
        await _quiet_close(admin)
        raise Unavailable(f"kafka unavailable at {settings.bootstrap}: {exc!r}") from None
    try:
        wanted = {settings.events_topic: settings.partitions, settings.dlq_topic: settings.partitions,
                  settings.chunks_topic: settings.partitions}
        existing = set(await admin.list_topics())
        missing = [
            NewTopic(name, num_partitions=n, replication_factor=settings.replication_factor,
                     topic_configs=topic_configs(settings.replication_factor))
            for name, n in wanted.items()
            if name not in existing
        ]
        if missing:
            try:
                await admin.create_topics(missing)
            except TopicAlreadyExistsError:
                pass  # created concurrently by another process
            log.info("created topics %s", [t.name for t in missing])
        counts = await _partition_counts(admin, list(wanted))
        if counts.get(settings.events_topic, 0) < settings.partitions:
            raise RuntimeError(
                f"topic {settings.events_topic} has {counts.get(settings.events_topic)} partitions, "
                f"fewer than FANLINE_TOPIC_PARTITIONS={settings.partitions}"
            )
        return counts
    except KafkaError as exc:
        raise Unavailable(f"kafka error while creating topics: {exc!r}") from None
    finally:
        await _quiet_close(admin)


def topic_configs(replication_factor: int) -> dict[str, str]:
    """Per-topic settings: ``min.insync.replicas`` one less than the replication
    factor (2 of 3), so with ``acks=all`` an acknowledged event is on two
    brokers and losing any one broker neither loses it nor stops producing.
    Set on the topic rather than left to the broker default (1 unless an
    operator changed it), which would acknowledge writes held by one broker."""
    if replication_factor < 2:
        return {}
    return {"min.insync.replicas": str(replication_factor - 1)}


async def _partition_counts(admin: AIOKafkaAdminClient, topics: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _ in range(50):  # metadata may lag a fresh create for a moment
        described: Any = await admin.describe_topics(topics)
        counts = {t["topic"]: len(t.get("partitions", [])) for t in described}
        if all(counts.get(t, 0) > 0 for t in topics):
            return counts
        await asyncio.sleep(0.1)
    return counts


async def _quiet_close(client: Any) -> None:
    try:
        await client.close()
    except Exception:  # noqa: BLE001 - closing a half-started client may fail
        pass


class EventPublisher:
    """Publishes outbox events to the events topic.

    ``publish`` returns False instead of raising when the broker is
    unavailable: callers keep the event in the outbox for the relay.
    """

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()
        self._last_error: str | None = "not connected yet"
        # After a failure the fast path skips the broker for a moment (a small
        # circuit breaker) so requests do not each wait out a connect timeout
        # while Kafka is down; the relay keeps trying meanwhile.
        self._retry_at = 0.0
        self._gauges_at = 0.0

    async def _ensure(self) -> AIOKafkaProducer:
        if self._producer is not None:
            return self._producer
        async with self._lock:
            if self._producer is not None:
                return self._producer
            if time.monotonic() < self._retry_at:
                raise Unavailable(f"kafka unavailable: {self._last_error}")
            producer = AIOKafkaProducer(
                bootstrap_servers=self._settings.bootstrap,
                enable_idempotence=self._settings.idempotence,
                acks="all",
                linger_ms=0,
                request_timeout_ms=int(self._settings.request_timeout_s * 1000),
            )
            try:
                await asyncio.wait_for(producer.start(), self._settings.request_timeout_s)
            except (TimeoutError, KafkaError, OSError) as exc:
                await _quiet_close(producer)
                self._last_error = repr(exc)
                self._retry_at = time.monotonic() + CIRCUIT_OPEN_S
                raise Unavailable(f"kafka unavailable: {exc!r}") from None
            self._producer = producer
            self._last_error = None
            return producer

    async def publish(self, event: OutboxEvent) -> bool:
        """Send one event and wait for the broker's acknowledgement."""
        started = time.perf_counter()
        try:
            producer = await self._ensure()
            await asyncio.wait_for(
                producer.send_and_wait(self._settings.events_topic, event.payload, key=event.key.encode(),
                                       headers=kafka_headers(event.request_id)),
                self._settings.request_timeout_s,
            )
        except (TimeoutError, Unavailable, KafkaError, OSError) as exc:
            metrics.KAFKA_PRODUCE_ERRORS.labels(type(exc).__name__).inc()
            self._last_error = repr(exc)
            await self._reset()
            return False
        metrics.KAFKA_PRODUCE_LATENCY.observe(time.perf_counter() - started)
        self._observe_cluster(producer)
        return True

    def _observe_cluster(self, producer: AIOKafkaProducer) -> None:
        """Export the brokers' health as this producer's metadata has it (at most
        every ``CLUSTER_GAUGES_EVERY_S``): live brokers, events-topic partitions
        led per broker, and partitions under-replicated or without a leader.
        The metadata refreshes on any produce error and every 5 minutes."""
        now = time.monotonic()
        if now < self._gauges_at:
            return
        self._gauges_at = now + CLUSTER_GAUGES_EVERY_S
        cluster = producer.client.cluster
        brokers = {b.nodeId for b in cluster.brokers()}
        metrics.KAFKA_BROKERS_LIVE.set(len(brokers))
        partitions: dict[int, Any] = getattr(cluster, "_partitions", {}).get(self._settings.events_topic, {})
        led = dict.fromkeys(brokers, 0)
        under = 0
        for meta in partitions.values():
            if meta.leader in led:
                led[meta.leader] += 1
            if meta.leader < 0 or len(meta.isr) < len(meta.replicas):
                under += 1
        for broker, count in led.items():
            metrics.KAFKA_PARTITION_LEADERS.labels(str(broker)).set(count)
        metrics.KAFKA_UNDER_REPLICATED.set(under)

    async def publish_many(self, events: list[OutboxEvent]) -> list[OutboxEvent]:
        """Send a batch; return the events the broker acknowledged."""
        if not events:
            return []
        try:
            producer = await self._ensure()
        except Unavailable:
            return []
        futures = []
        started = time.perf_counter()
        try:
            for event in events:
                futures.append(
                    (event, await producer.send(self._settings.events_topic, event.payload, key=event.key.encode(),
                                                headers=kafka_headers(event.request_id)))
                )
        except (KafkaError, OSError) as exc:
            metrics.KAFKA_PRODUCE_ERRORS.labels(type(exc).__name__).inc()
        done: list[OutboxEvent] = []
        for event, future in futures:
            try:
                await asyncio.wait_for(future, self._settings.request_timeout_s)
                metrics.KAFKA_PRODUCE_LATENCY.observe(time.perf_counter() - started)
                done.append(event)
            except (TimeoutError, KafkaError, OSError) as exc:
                metrics.KAFKA_PRODUCE_ERRORS.labels(type(exc).__name__).inc()
                self._last_error = repr(exc)
        if len(done) < len(events):
            await self._reset()
        elif done:
            self._observe_cluster(producer)
        return done

    async def ping(self) -> None:
        """Raise ``Unavailable`` unless a producer is connected (or can be)."""
        producer = await self._ensure()
        try:
            await asyncio.wait_for(producer.partitions_for(self._settings.events_topic), 3.0)
        except (TimeoutError, KafkaError, OSError) as exc:
            await self._reset()
            raise Unavailable(f"kafka unavailable: {exc!r}") from None

    async def _reset(self, *, flush: bool = False) -> None:
        """Drop the producer after a failure (the circuit opens). Its unsent
        messages are *discarded*, not flushed: the callers reported them as
        not published, so they stay in the outbox and the relay publishes them
        again; flushing (aiokafka's ``stop``) waited out the outage and then
        delivered them too — measured after a Kafka outage with two gateways:
        two or three copies of every event on the topic
        (tests/e2e/test_relay_leader.py)."""
        self._retry_at = time.monotonic() + CIRCUIT_OPEN_S
        async with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            await (_quiet_close(producer) if flush else _discard(producer, self._settings.request_timeout_s))

    async def close(self) -> None:
        await self._reset(flush=True)


async def _discard(producer: AIOKafkaProducer, timeout_s: float) -> None:
    """Close ``producer`` without sending what it still holds. aiokafka has
    no abort: stop its sender task (requests already on the wire finish or
    fail) and close its connections, skipping ``stop()``'s flush."""
    sender = getattr(producer, "_sender", None)
    try:
        if sender is not None:
            await asyncio.wait_for(sender.close(), timeout_s)
        await asyncio.wait_for(producer.client.close(), timeout_s)
    except Exception as exc:  # noqa: BLE001 - a failed producer may fail to close too
        log.debug("discarding a failed producer: %r", exc)
    producer._closed = True  # a later stop() must not flush either
