"""The gateway's event publisher stays bounded while the brokers fail
(``shared/kafka.py``, policy ``policies.EVENT_PRODUCER``).

A Kafka broker killed under load once grew the gateway to 17.8 GB and an OOM
kill (docs/reliability.md): every send refused by the open circuit quoted the
previous error in its own, so the kept error text doubled with each refusal,
and each producer given up on was never stopped (``close()`` is not an
aiokafka producer method, and the error was swallowed). The first test uses a
real (unreachable) broker address; the others a fake producer, because a
real broker cannot be made to hold a send unanswered on cue. The real
broker kill is ``tests/e2e/test_cluster.py::test_kafka_controller_and_leader_killed``.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import ProducerFenced

from fanline_shared import kafka
from fanline_shared.config import KafkaSettings
from fanline_shared.domain import OutboxEvent
from fanline_shared.errors import Unavailable
from fanline_shared.policies import EVENT_PRODUCER


def settings(bootstrap: str = "127.0.0.1:9", timeout_s: float = 1.0) -> KafkaSettings:
    return KafkaSettings(
        bootstrap=bootstrap,
        idempotence=True,
        events_topic="events",
        dlq_topic="dlq",
        chunks_topic="chunks",
        partitions=1,
        replication_factor=1,
        request_timeout_s=timeout_s,
    )


def event() -> OutboxEvent:
    return OutboxEvent(uuid.uuid4(), "alice", b"{}")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_the_error_kept_for_readyz_does_not_grow_with_refused_sends() -> None:
    publisher = kafka.EventPublisher(settings(f"127.0.0.1:{closed_port()}"))
    for _ in range(24):  # one failed connect, then refusals while the circuit is open
        assert await publisher.publish(event()) is False
    with pytest.raises(Unavailable) as refused:
        await publisher.ping()
    # Before the fix this text was ~2**24 characters (it doubled per refusal).
    assert len(str(refused.value)) < 1000, len(str(refused.value))
    assert "KafkaConnectionError" in str(refused.value)  # the broker's own error, not one about it
    await publisher.close()


class FakeAccumulator:
    def __init__(self, producer: FakeProducer) -> None:
        self._producer = producer

    def fail_all(self, exc: BaseException) -> None:
        for f in self._producer.pending:
            if not f.done():
                f.set_exception(exc)


class FakeCluster:
    """The part of aiokafka's ClusterMetadata the broker gauges read."""

    def __init__(self, brokers: list[int], partitions: dict[str, dict[int, Any]]) -> None:
        self._brokers = brokers
        self._partitions = partitions

    def brokers(self) -> list[SimpleNamespace]:
        return [SimpleNamespace(nodeId=b) for b in self._brokers]


class FakeProducer:
    """An AIOKafkaProducer whose broker never answers a send (or raises ``send_error``)."""

    cluster = FakeCluster([], {})

    made: list[FakeProducer] = []
    send_error: BaseException | None = None
    answers = False  # the broker acknowledges every send at once

    def __init__(self, **kw: Any) -> None:
        self.pending: list[asyncio.Future[Any]] = []
        self.stopped = False
        self._message_accumulator = FakeAccumulator(self)
        self.client = SimpleNamespace(cluster=FakeProducer.cluster)
        FakeProducer.made.append(self)

    async def start(self) -> None:
        return None

    async def send(self, topic: str, value: bytes, key: bytes, headers: Any = None) -> asyncio.Future[Any]:
        if FakeProducer.send_error is not None:
            raise FakeProducer.send_error
        f: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending.append(f)
        if FakeProducer.answers:
            f.set_result(None)
        return f

    async def flush(self) -> None:
        await asyncio.wait(self.pending) if self.pending else None

    async def stop(self) -> None:
        await self.flush()  # like aiokafka: waits for every queued batch
        self.stopped = True


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> type[FakeProducer]:
    FakeProducer.made = []
    FakeProducer.send_error = None
    FakeProducer.answers = False
    FakeProducer.cluster = FakeCluster([], {})
    monkeypatch.setattr(kafka, "AIOKafkaProducer", FakeProducer)
    return FakeProducer


BOUNDS = replace(EVENT_PRODUCER, circuit_open_s=0.0, max_unacked=5, close_s=0.05)


async def test_a_timed_out_send_discards_its_producer_without_delivering_it(fake: type[FakeProducer]) -> None:
    """Reported as not published, so it must never reach the topic later (the
    relay, maybe in another gateway, publishes it from the outbox): the
    producer is dropped and what it held is failed, not flushed."""
    publisher = kafka.EventPublisher(settings(timeout_s=0.01), BOUNDS)
    assert await publisher.publish(event()) is False
    first = fake.made[0]
    assert first.stopped and publisher.unacked == 0
    assert all(f.done() and f.exception() is not None for f in first.pending)  # failed, not delivered
    assert await publisher.publish(event()) is False  # a new producer (the circuit is 0 s here)
    assert len(fake.made) == 2
    await publisher.close()


async def test_an_event_delivered_lately_is_not_sent_again(fake: type[FakeProducer]) -> None:
    """The relay may hand over an event the fast path delivered a moment ago
    (its outbox row not yet cleared): done at once, no second copy."""
    fake.answers = True
    publisher = kafka.EventPublisher(settings(timeout_s=1.0), BOUNDS)
    publisher._observe_cluster = lambda producer, force=False: None  # type: ignore[method-assign]  # (no cluster here)
    waiting = [event() for _ in range(3)]
    assert await publisher.publish(waiting[0]) is True
    assert await publisher.publish_many(waiting) == waiting
    assert len(fake.made[0].pending) == 3  # not 4
    await publisher.close()


async def test_the_relay_batch_sends_only_the_room_left(fake: type[FakeProducer]) -> None:
    publisher = kafka.EventPublisher(settings(timeout_s=0.01), BOUNDS)
    assert await publisher.publish_many([event() for _ in range(12)]) == []
    assert len(fake.made[0].pending) == 5
    await publisher.close()


async def test_an_unusable_producer_is_replaced_and_stopped(fake: type[FakeProducer]) -> None:
    publisher = kafka.EventPublisher(settings(timeout_s=0.01), BOUNDS)
    fake.send_error = ProducerFenced()
    assert await publisher.publish(event()) is False
    assert fake.made[0].stopped  # before the fix: "closed" with a method it lacks, left running
    fake.send_error = None
    assert await publisher.publish(event()) is False  # times out, on a new producer
    assert len(fake.made) == 2
    await publisher.close()


def partition(leader: int, replicas: list[int], isr: list[int]) -> SimpleNamespace:
    return SimpleNamespace(leader=leader, replicas=replicas, isr=isr)


def test_partition_health_counts_short_isrs_against_min_insync_replicas() -> None:
    """RF 3, min ISR 2: one broker gone leaves partitions under-replicated but
    writable; two gone (or no leader) leaves them under min ISR."""
    assert kafka.min_insync_replicas(3) == 2 and kafka.min_insync_replicas(1) == 1
    health = kafka.partition_health(
        [
            partition(1, [1, 2, 3], [1, 2, 3]),
            partition(2, [1, 2, 3], [2, 3]),
            partition(3, [1, 2, 3], [3]),
            partition(-1, [1, 2, 3], []),
        ],
        [1, 2, 3],
        min_isr=2,
    )
    assert health == kafka.PartitionHealth({1: 1, 2: 1, 3: 1}, under_replicated=3, under_min_isr=2)


def gauge(name: str, labels: dict[str, str] | None = None) -> float | None:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels or {})


async def test_a_failed_send_exports_what_the_producer_knew_of_the_brokers(fake: type[FakeProducer]) -> None:
    """Below min.insync.replicas every acks=all send fails, so the gauges must
    be read on failure too, not only after a success; a broker that left
    leads 0 partitions instead of keeping its last count."""
    fake.cluster = FakeCluster([1, 2, 3], {"events": {0: partition(1, [1, 2, 3], [1, 2, 3])}})
    publisher = kafka.EventPublisher(replace(settings(timeout_s=1.0), replication_factor=3), BOUNDS)
    fake.answers = True
    assert await publisher.publish(event()) is True
    assert gauge("fanline_kafka_partition_leaders", {"broker": "1"}) == 1
    assert gauge("fanline_kafka_partitions_under_min_isr") == 0
    fake.answers = False
    fake.cluster._brokers = [3]
    fake.cluster._partitions = {"events": {0: partition(3, [1, 2, 3], [3])}}
    publisher._settings = replace(publisher._settings, request_timeout_s=0.01)
    assert await publisher.publish(event()) is False
    assert gauge("fanline_kafka_brokers_live") == 1
    assert gauge("fanline_kafka_partitions_under_replicated") == 1
    assert gauge("fanline_kafka_partitions_under_min_isr") == 1
    assert gauge("fanline_kafka_partition_leaders", {"broker": "1"}) == 0
    assert gauge("fanline_kafka_partition_leaders", {"broker": "3"}) == 1
    await publisher.close()
