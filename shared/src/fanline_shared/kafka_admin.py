"""Kafka topic administration: explicit creation of Fanline's topics and
the settings they are created with.

Topics are created here with a configured partition count and never
auto-created (auto-created topics get one partition, which caps the number of
useful fan-out workers at one). Their durability (``min.insync.replicas``,
set on creation and corrected on existing topics) is ``kafka_topics``. Split
out of ``kafka``, which re-exports these names and holds the publisher.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from . import policies
from .config import KafkaSettings
from .errors import Unavailable
from .kafka_topics import MIN_INSYNC, Durability, correct_min_insync, min_insync_for

# The logger these lines had before the split, so log output is unchanged.
log = logging.getLogger("fanline_shared.kafka")


async def ensure_topics(settings: KafkaSettings, timeout_s: float = 30.0) -> dict[str, int]:
    """Create the events, dead-letter and fan-out chunks topics if missing,
    and raise a ``min.insync.replicas`` below one less than the replication
    factor on any of them (``kafka_topics``); return partition counts. Raise
    ``Unavailable`` if the broker does not answer, and ``RuntimeError`` if an
    existing events topic has fewer partitions than configured (operators
    must add partitions deliberately)."""
    counts, _ = await ensure_topics_report(settings, timeout_s)
    return counts


async def ensure_topics_report(settings: KafkaSettings, timeout_s: float = 30.0) -> tuple[dict[str, int], dict[str, Durability]]:
    """``ensure_topics``, also returning each topic's durability (``fanline topics ensure``)."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.bootstrap, request_timeout_ms=int(timeout_s * 1000), **settings.security.client_kwargs()
    )
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
    except (TimeoutError, KafkaError, OSError) as exc:
        await _quiet_close(admin)
        raise Unavailable(f"kafka unavailable at {settings.bootstrap}: {exc!r}") from None
    try:
        wanted = {
            settings.events_topic: settings.partitions,
            settings.dlq_topic: settings.partitions,
            settings.chunks_topic: settings.partitions,
        }
        existing = set(await admin.list_topics())
        missing = [
            NewTopic(
                name,
                num_partitions=n,
                replication_factor=settings.replication_factor,
                topic_configs=topic_configs(settings.replication_factor),
            )
            for name, n in wanted.items()
            if name not in existing
        ]
        if missing:
            try:
                await admin.create_topics(missing)
            except TopicAlreadyExistsError:
                pass  # created concurrently by another process
            log.info("created topics %s", [t.name for t in missing])
        counts = await _partition_counts(admin, list(wanted), settings.events_topic, settings.partitions)
        if counts.get(settings.events_topic, 0) < settings.partitions:
            raise RuntimeError(
                f"topic {settings.events_topic} has {counts.get(settings.events_topic)} partitions, "
                f"fewer than FANLINE_TOPIC_PARTITIONS={settings.partitions}"
            )
        return counts, await correct_min_insync(admin, list(wanted))
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
    return {MIN_INSYNC: str(min_insync_for(replication_factor))}


def min_insync_replicas(replication_factor: int) -> int:
    """The ``min.insync.replicas`` ``topic_configs`` gives a topic of this
    replication factor (1, the broker default, below 2)."""
    return int(topic_configs(replication_factor).get("min.insync.replicas", "1"))


async def _partition_counts(admin: AIOKafkaAdminClient, topics: list[str], events: str, partitions: int) -> dict[str, int]:
    """Each topic's partition count, once every topic has some and ``events``
    has ``partitions`` (metadata may lag a fresh create: some partitions, or
    none, for a moment), or what was described last after
    ``policies.TOPIC_METADATA_SETTLE_S``."""
    counts: dict[str, int] = {}
    deadline = asyncio.get_running_loop().time() + policies.TOPIC_METADATA_SETTLE_S
    while True:
        described: Any = await admin.describe_topics(topics)
        counts = {t["topic"]: len(t.get("partitions", [])) for t in described}
        if all(counts.get(t, 0) > 0 for t in topics) and counts.get(events, 0) >= partitions:
            return counts
        if asyncio.get_running_loop().time() >= deadline:
            return counts
        await asyncio.sleep(0.1)


async def _quiet_close(client: Any) -> None:
    try:
        await client.close()
    except Exception:  # noqa: BLE001 - closing a half-started client may fail
        pass
