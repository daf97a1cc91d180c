"""``fanline topics ensure|verify``: the events, dead-letter and fan-out chunks topics.

``ensure`` is the same code path the gateway and the worker run at start-up
(``fanline_shared.kafka.ensure_topics``): create what is missing with
``FANLINE_TOPIC_PARTITIONS`` partitions, refuse an events topic with fewer.
``verify`` only looks: it never creates anything, so it is safe against a
cluster whose topics are managed elsewhere (kafka-init, an operator, GitOps).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from fanline_shared.config import KafkaSettings
from fanline_shared.errors import Unavailable
from fanline_shared.kafka import ensure_topics


@dataclass(frozen=True)
class TopicReport:
    topic: str
    partitions: int  # 0: missing
    wanted: int

    @property
    def ok(self) -> bool:
        return self.partitions >= self.wanted

    def line(self) -> str:
        if not self.partitions:
            return f"{self.topic}: MISSING (want {self.wanted} partitions)"
        verdict = "ok" if self.ok else f"TOO FEW (want >= {self.wanted})"
        return f"{self.topic}: {self.partitions} partitions, {verdict}"


async def ensure(settings: KafkaSettings) -> list[TopicReport]:
    counts = await ensure_topics(settings)
    return [
        TopicReport(t, counts.get(t, 0), settings.partitions)
        for t in (settings.events_topic, settings.dlq_topic, settings.chunks_topic)
    ]


async def verify(settings: KafkaSettings, timeout_s: float = 15.0) -> list[TopicReport]:
    """Partition counts of both topics as the broker reports them."""
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
        return [TopicReport(t, counts.get(t, 0), settings.partitions) for t in wanted]
    except KafkaError as exc:
        raise Unavailable(f"kafka error: {exc!r}") from None
    finally:
        try:
            await admin.close()
        except Exception:  # noqa: BLE001 - closing a half-broken client
            pass
