"""One outbox relay per outbox across gateway replicas (issue 14, 3(e)).

Two gateway processes share the real engines; Kafka is stopped while tweets
are posted through both (every post answers 201: its event waits in
tweet-store's outbox), then started again. Each relay used to sweep the
outbox on its own, so every waiting event reached the topic twice. Now only
the lease holder publishes: the test reads the whole events topic and finds
each tweet's ``TweetCreated`` exactly once, and exactly one gateway reports
itself active (``fanline_outbox_relay_active``).

The outage runs only on real Kafka: the embedded broker forgets its topics
when it restarts (a lone broker restart is outside what ``make run``
supports, see README). On the embedded system two gateways show the hand-over
instead: one active relay per outbox, and the other takes over when it stops.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from deploy.local.system import System, metrics_url_of

from .client import Api, eventually
from .conftest import make_system

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
POSTS = 8


@pytest.fixture
def two_gateways(real_infra: Any, tmp_path: Path) -> Iterator[tuple[System, str]]:
    system = make_system("real", 25600, tmp_path, real_infra)
    system.start(timeout=180)
    try:
        yield system, system.start_api_replica(1)
    finally:
        system.stop()


def test_one_relay_is_active_per_outbox_and_a_standby_takes_over(tmp_path: Path) -> None:
    """Embedded (SQLite leases over the owners' internal API): with a 3 s
    lease, the standby takes over about a second after the active gateway
    stops (it releases its leases on the way out)."""
    system = make_system("embedded", 25700, tmp_path, FANLINE_RELAY_LEASE_S="3")
    system.start()
    try:
        urls = {"api": system.url(), "api-1": system.start_api_replica(1)}

        def active(source: str) -> dict[str, float]:
            return {name: relay_active(url, source) for name, url in urls.items()}

        for source in ("tweet-store", "social-graph"):
            eventually(
                lambda source=source: sorted(active(source).values()) == [0.0, 1.0],
                timeout=20,
                what=f"one active relay for {source}: {active(source)}",
            )
        holder = max(urls, key=lambda name: relay_active(urls[name], "tweet-store"))
        standby = next(name for name in urls if name != holder)
        system.stop_service(holder)
        stopped = time.monotonic()
        eventually(
            lambda: relay_active(urls[standby], "tweet-store") == 1.0,
            timeout=15,
            what=f"{standby} takes over tweet-store's outbox",
        )
        assert time.monotonic() - stopped < 5  # released, not left to lapse
    finally:
        system.stop()


def relay_active(url: str, source: str) -> float:
    """The relay-active gauge of the gateway at ``url`` (read on its metrics port)."""
    text = httpx.get(metrics_url_of(int(url.rsplit(":", 1)[1])), timeout=10).text
    m = re.search(rf'^fanline_outbox_relay_active\{{source="{source}"\}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


async def created_counts(bootstrap: str, topic: str, partition_count: int, tweet_ids: set[str]) -> Counter[str]:
    """How often each of ``tweet_ids`` has a TweetCreated on the whole topic."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(partition_count)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        end = await consumer.end_offsets(partitions)
        counts: Counter[str] = Counter()
        deadline = time.monotonic() + 60

        async def behind() -> bool:
            return any([await consumer.position(tp) < end[tp] for tp in partitions])

        while await behind():
            assert time.monotonic() < deadline, "could not read the topic to its end"
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                for record in records:
                    event = orjson.loads(record.value)
                    if event.get("type") == "TweetCreated" and event["data"]["tweet_id"] in tweet_ids:
                        counts[event["data"]["tweet_id"]] += 1
        return counts
    finally:
        await consumer.stop()


@pytest.mark.fault
@pytest.mark.real_infra
def test_after_a_kafka_outage_each_waiting_event_is_published_once(two_gateways: tuple[System, str], kafka_control: Any) -> None:
    system, replica = two_gateways
    apis = [Api(system.url()), Api(replica)]
    try:
        author, token = apis[0].user("rl")
        reader, reader_token = apis[0].user("rr")
        apis[0].follow(reader_token, reader, author)
        first = apis[1].post(token, "before the outage")["id"]
        eventually(lambda: first in apis[0].home_ids(reader_token), timeout=60, what="delivery before the outage")

        kafka_control.stop_kafka()
        try:
            posted = [apis[i % 2].post(token, f"during the outage {i}")["id"] for i in range(POSTS)]
            time.sleep(4)  # both relays find the events stale (1.5 s) and fail to publish them
        finally:
            kafka_control.start_kafka()
        eventually(
            lambda: set(posted) <= set(apis[0].home_ids(reader_token)),
            timeout=180,
            interval=1,
            what="every tweet posted during the outage delivered",
        )
        time.sleep(5)  # any second copy would be published by now (sweeps every 0.5 s)
        env = system.env()
        counts = asyncio.run(
            created_counts(
                system.bootstrap, env["FANLINE_EVENTS_TOPIC"], int(env.get("FANLINE_TOPIC_PARTITIONS", "8")), {first, *posted}
            )
        )
        assert counts == Counter({tweet_id: 1 for tweet_id in (first, *posted)}), counts
        eventually(
            lambda: sum(relay_active(url, "tweet-store") for url in (system.url(), replica)) == 1,
            timeout=30,
            what="exactly one active relay for tweet-store",
        )
    finally:
        for api in apis:
            api.close()
