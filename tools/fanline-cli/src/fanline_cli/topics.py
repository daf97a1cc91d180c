"""``fanline topics ensure|verify``: the events, dead-letter and fan-out chunks topics.

``ensure`` is the same code path the gateway and the worker run at start-up
(``fanline_shared.kafka.ensure_topics``): create what is missing with
``FANLINE_TOPIC_PARTITIONS`` partitions, refuse an events topic with fewer,
and raise a ``min.insync.replicas`` below one less than the topic's
replication factor (``fanline_shared.kafka_topics``). ``verify`` only looks:
it never changes anything, so it is safe against a cluster whose topics are
managed elsewhere (kafka-init, an operator, GitOps); a topic with too few
partitions or too low a ``min.insync.replicas`` fails it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from fanline_shared.config import KafkaSettings
from fanline_shared.errors import Unavailable
from fanline_shared.kafka import ensure_topics_report
from fanline_shared.kafka_topics import Durability, durability, min_insync_for


@dataclass(frozen=True)
class TopicReport:
    topic: str
    partitions: int  # 0: missing
    wanted: int
    replication_factor: int = 0
    min_insync: int | None = None  # None: not read (one replica: nothing to protect)
    corrected_from: int | None = None  # ensure raised min.insync.replicas from this

    @classmethod
    def of(cls, topic: str, partitions: int, wanted: int, d: Durability | None) -> TopicReport:
        if d is None:
            return cls(topic, partitions, wanted)
        return cls(topic, partitions, wanted, d.replication_factor, d.min_insync, d.corrected_from)

    @property
    def durable(self) -> bool:
        return self.min_insync is None or self.min_insync >= min_insync_for(self.replication_factor)

    @property
    def ok(self) -> bool:
        return self.partitions >= self.wanted and self.durable

    def line(self) -> str:
        if not self.partitions:
            return f"{self.topic}: MISSING (want {self.wanted} partitions)"
        problems = []
        if self.partitions < self.wanted:
            problems.append(f"TOO FEW partitions (want >= {self.wanted})")
        if not self.durable:
            problems.append(f"min.insync.replicas TOO LOW (want >= {min_insync_for(self.replication_factor)})")
        corrected = f" (raised from {self.corrected_from})" if self.corrected_from is not None else ""
        isr = f", min.insync.replicas {self.min_insync}{corrected}" if self.min_insync is not None else ""
        return (
            f"{self.topic}: {self.partitions} partitions, replication factor {self.replication_factor}{isr}, "
            f"{', '.join(problems) or 'ok'}"
        )


async def ensure(settings: KafkaSettings) -> list[TopicReport]:
    counts, durable = await ensure_topics_report(settings)
    return [
        TopicReport.of(t, counts.get(t, 0), settings.partitions, durable.get(t))
        for t in (settings.events_topic, settings.dlq_topic, settings.chunks_topic)
    ]


async def verify(settings: KafkaSettings, timeout_s: float = 15.0) -> list[TopicReport]:
    """Partition counts, replication factors and min.insync.replicas of the
    topics as the broker reports them."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.bootstrap, request_timeout_ms=int(timeout_s * 1000), **settings.security.client_kwargs()
    )
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
    except (TimeoutError, KafkaError, OSError) as exc:
        raise Unavailable(f"kafka unavailable at {settings.bootstrap}: {exc!r}") from None
    try:
        wanted = [settings.events_topic, settings.dlq_topic, settings.chunks_topic]
        existing = set(await admin.list_topics())
        present = [t for t in wanted if t in existing]
        described: Any = await admin.describe_topics(present) if present else []
        counts = {t["topic"]: len(t.get("partitions", [])) for t in described}
        durable = await durability(admin, present) if present else {}
        return [TopicReport.of(t, counts.get(t, 0), settings.partitions, durable.get(t)) for t in wanted]
    except KafkaError as exc:
        raise Unavailable(f"kafka error: {exc!r}") from None
    finally:
        try:
            await admin.close()
        except Exception:  # noqa: BLE001 - closing a half-broken client
            pass
