"""``fanline dlq inspect|replay``: the dead-letter topic.

The fan-out worker sends an event it can never process to
``FANLINE_DLQ_TOPIC`` with the original key and value and these headers:
``error.reason`` (``invalid_event``, a domain error code, or ``error``),
``error.detail`` and ``origin.topic|partition|offset``.

Both commands read the topic from the beginning with a consumer that has no
group and commits nothing, so they can run any number of times without
moving anyone's offsets. ``replay`` republishes the original key and value
to the events topic (with a ``fanline.replayed-from`` header). That is safe
even for events that were already applied or that a newer event overtook:
the worker is idempotent and checks current state (a replayed
``TweetCreated`` for a deleted tweet delivers nothing, a replayed
``Followed`` after an unfollow merges nothing). An event that is still
poison simply lands in the dead-letter topic again. Kafka topics are
append-only: replaying does not remove anything from the dead-letter topic,
so use ``--reason`` / ``--limit`` and the printed offsets to choose.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from fanline_shared.config import KafkaSettings
from fanline_shared.errors import Unavailable
from fanline_shared.logs import KAFKA_REQUEST_ID_HEADER

REPLAYED_FROM = "fanline.replayed-from"


@dataclass(frozen=True)
class DeadLetter:
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: dict[str, str]

    @property
    def reason(self) -> str:
        return self.headers.get("error.reason", "")

    def as_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "offset": self.offset,
            "timestamp_ms": self.timestamp_ms,
            "key": None if self.key is None else self.key.decode(errors="replace"),
            "headers": self.headers,
            "payload": self.value.decode(errors="replace"),
        }

    def text(self) -> str:
        lines = [
            f"--- partition {self.partition} offset {self.offset} "
            f"({time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(self.timestamp_ms / 1000))} UTC)",
            f"key:     {None if self.key is None else self.key.decode(errors='replace')}",
        ]
        lines += [f"{name + ':':<18} {value}" for name, value in sorted(self.headers.items())]
        lines.append(f"payload: {self.value.decode(errors='replace')}")
        return "\n".join(lines)


async def _partitions(consumer: AIOKafkaConsumer, topic: str, timeout_s: float = 15.0) -> list[int]:
    """The topic's partition ids. A consumer with no subscription has no
    metadata for any topic (aiokafka bootstraps with an empty topic list, and
    ``topics()`` does not keep what it fetched), so its metadata is asked
    for: against real Kafka ``partitions_for_topic`` alone answered None and
    ``dlq inspect`` failed with "No partitions are currently assigned"."""
    found = consumer.partitions_for_topic(topic)
    if not found:
        # aiokafka's own way to track a topic's metadata: add it (a refresh).
        await asyncio.wait_for(consumer._client.add_topic(topic), timeout_s)
        found = consumer.partitions_for_topic(topic)
    return sorted(found or ())


def _headers(raw: Iterable[tuple[str, bytes]] | None) -> dict[str, str]:
    return {name: (value or b"").decode(errors="replace") for name, value in (raw or ())}


async def read(settings: KafkaSettings, limit: int | None = None, timeout_s: float = 15.0) -> list[DeadLetter]:
    """Every message of the dead-letter topic up to its current end (or the
    first ``limit``), oldest first. Commits nothing."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=int(timeout_s * 1000),
        **settings.security.client_kwargs(),  # TLS / SASL (fanline_shared.engine_security)
    )
    try:
        await asyncio.wait_for(consumer.start(), timeout_s)
    except (TimeoutError, KafkaError, OSError) as exc:
        await _close(consumer)
        raise Unavailable(f"kafka unavailable at {settings.bootstrap}: {exc!r}") from None
    try:
        topics = await consumer.topics()
        if settings.dlq_topic not in topics:
            return []
        partitions = await _partitions(consumer, settings.dlq_topic)
        tps = [TopicPartition(settings.dlq_topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        positions = {tp: await consumer.position(tp) for tp in tps}
        pending = {tp for tp in tps if positions[tp] < ends[tp]}
        letters: list[DeadLetter] = []
        deadline = time.monotonic() + timeout_s
        while pending and (limit is None or len(letters) < limit):
            batch = await consumer.getmany(*pending, timeout_ms=500)
            if not batch and time.monotonic() > deadline:
                raise Unavailable(
                    f"timed out reading {settings.dlq_topic} (partitions left: {sorted(tp.partition for tp in pending)})"
                )
            for tp, messages in batch.items():
                deadline = time.monotonic() + timeout_s
                for m in messages:
                    if m.offset >= ends[tp]:
                        break
                    letters.append(DeadLetter(m.partition, m.offset, m.timestamp, m.key, m.value or b"", _headers(m.headers)))
                if await consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)
        letters.sort(key=lambda d: (d.timestamp_ms, d.partition, d.offset))
        return letters if limit is None else letters[:limit]
    except KafkaError as exc:
        raise Unavailable(f"kafka error while reading {settings.dlq_topic}: {exc!r}") from None
    finally:
        await _close(consumer)


async def replay(settings: KafkaSettings, letters: list[DeadLetter], timeout_s: float = 15.0) -> int:
    """Republish each dead letter's key and value to the events topic."""
    if not letters:
        return 0
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap,
        enable_idempotence=settings.idempotence,
        acks="all",
        request_timeout_ms=int(timeout_s * 1000),
        **settings.security.client_kwargs(),
    )
    try:
        await asyncio.wait_for(producer.start(), timeout_s)
    except (TimeoutError, KafkaError, OSError) as exc:
        await _close(producer)
        raise Unavailable(f"kafka unavailable at {settings.bootstrap}: {exc!r}") from None
    try:
        for letter in letters:
            origin = f"{settings.dlq_topic}:{letter.partition}:{letter.offset}".encode()
            headers = [(REPLAYED_FROM, origin)]
            request_id = letter.headers.get(KAFKA_REQUEST_ID_HEADER)
            if request_id:  # the replayed event stays findable by its request id
                headers.append((KAFKA_REQUEST_ID_HEADER, request_id.encode()))
            await asyncio.wait_for(
                producer.send_and_wait(settings.events_topic, letter.value, key=letter.key, headers=headers),
                timeout_s,
            )
        return len(letters)
    except (TimeoutError, KafkaError) as exc:
        raise Unavailable(f"replay to {settings.events_topic} failed: {exc!r}") from None
    finally:
        await _close(producer)


async def _close(client: Any) -> None:
    try:
        await client.stop()
    except Exception:  # noqa: BLE001 - closing a half-started client may fail
        pass
