"""Two-worker correctness under a partition split (issue #13, item 7).

An operator adds partitions to the events topic (2 -> 6) to scale out the
workers. Kafka's default partitioner is ``murmur2(key) % partitions``, so
the events of one author (keyed by author) or of one followee's follows
(keyed by followee) written before the split sit on one partition and those
written after it on another, consumed by another worker, in any order. The
authors here are chosen so that every one of them moves.

Before the split the worker is stopped, so each author's tweets, a delete and
follow changes queue on the old partitions; after it (the gateway restarted
so that its producer sees the new partition count), the *later* events of the
same keys — a delete of an old tweet, an unfollow after the old tweets, a
re-follow after an old unfollow — land on the new partitions. Two workers
then drain both at once, and the later event may well be applied first.

What must hold, whatever the order: every reader's home timeline ends as the
undeleted tweets of exactly the authors they follow, each once. (The
handlers check the stored truth — the tweet, the follow edge — before
writing, and a slice re-reads its followers after writing; this test is what
says that is enough.) Real Kafka + Cassandra only.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions
from aiokafka.partitioner import murmur2

from deploy.local.system import System

from .client import Api, eventually
from .conftest import make_system

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.real_infra]

BEFORE, AFTER = 2, 6


def partition(key: str, partitions: int) -> int:
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def moving_name(prefix: str) -> str:
    """A username whose events change partition in the split."""
    while True:
        name = f"{prefix}{secrets.token_hex(4)}"
        if partition(name.lower(), BEFORE) != partition(name.lower(), AFTER):
            return name


@pytest.fixture
def split_system(real_infra: Any, tmp_path: Path) -> Iterator[System]:
    system = make_system(
        "real", 26500, tmp_path, real_infra, FANLINE_TOPIC_PARTITIONS=str(BEFORE), FANLINE_WORKER_REBALANCE_TIMEOUT_S="3"
    )
    system.start(timeout=180)
    yield system
    system.stop()


async def split(bootstrap: str, topics: list[str], timeout_s: float = 15.0) -> dict[str, int]:
    """Add partitions; returns the partition count each topic then has.

    CreatePartitions answers before every metadata cache has the new count
    (a fresh-clone CI run read 2 right after growing to 6), so the count is
    read until it shows, for at most ``timeout_s``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_partitions({t: NewPartitions(total_count=AFTER) for t in topics})
        deadline = time.monotonic() + timeout_s
        while True:
            described = await admin.describe_topics(topics)
            counts = {d["topic"]: len(d["partitions"]) for d in described}
            if all(n == AFTER for n in counts.values()) or time.monotonic() > deadline:
                return counts
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


async def messages_per_partition(bootstrap: str, topic: str) -> dict[int, int]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        parts = [TopicPartition(topic, p) for p in range(AFTER)]
        ends = await consumer.end_offsets(parts)
        return {tp.partition: n for tp, n in ends.items()}
    finally:
        await consumer.stop()


def test_a_partition_split_mid_stream_leaves_every_home_timeline_exact(split_system: System, real_infra: Any) -> None:
    system = split_system
    env = system.env()
    events_topic = env["FANLINE_EVENTS_TOPIC"]
    chunks_topic = env.get("FANLINE_CHUNKS_TOPIC", f"{events_topic}.chunks")
    api = Api(system.url())
    authors = {name: api.login(api.sign_up(name)) for name in (moving_name("pa") for _ in range(4))}
    readers = {name: api.login(api.sign_up(name)) for name in (moving_name("pr") for _ in range(3))}
    a = list(authors)
    r = list(readers)
    follows = {(reader, author) for reader in r for author in a}
    for reader, author in sorted(follows):
        api.follow(readers[reader], reader, author)
    live: dict[str, str] = {}  # tweet id -> author

    def post(author: str, n: int, phase: str) -> list[str]:
        ids = [api.post(authors[author], f"{phase} {author} {i}")["id"] for i in range(n)]
        live.update(dict.fromkeys(ids, author))
        return ids

    def delete(tweet_id: str) -> None:
        resp = api.request("DELETE", f"/v1/tweets/{tweet_id}", authors[live.pop(tweet_id)])
        assert resp.status_code == 204, resp.text

    # Everything delivered once before the worker stops (the baseline works).
    first = post(a[0], 1, "warm-up")[0]
    eventually(lambda: all(first in api.home_ids(readers[x]) for x in r), timeout=60, what="warm-up delivered")

    # Before the split: a backlog on the old partitions.
    system.stop_service("fanout-worker")
    old = {author: post(author, 3, "before") for author in a}
    api.unfollow(readers[r[0]], r[0], a[0])  # re-followed after the split
    follows.discard((r[0], a[0]))

    grown = asyncio.run(split(system.bootstrap, [events_topic, chunks_topic]))
    assert grown == {events_topic: AFTER, chunks_topic: AFTER}
    # The gateway's producer learns the new count from fresh metadata.
    system.stop_service("api")
    system.start_service("api")
    system.wait_ready(services=("api",))
    api.close()
    api = Api(system.url())

    # After the split, later events of the same keys, on new partitions.
    for author in a:
        post(author, 2, "after")
    delete(old[a[1]][0])  # the delete overtakes nothing: its create is still queued
    api.follow(readers[r[0]], r[0], a[0])
    follows.add((r[0], a[0]))
    api.unfollow(readers[r[1]], r[1], a[2])  # its author's queued tweets must not land
    follows.discard((r[1], a[2]))
    api.unfollow(readers[r[2]], r[2], a[3])
    api.follow(readers[r[2]], r[2], a[3])  # unfollow and re-follow, both after the split

    counts = asyncio.run(messages_per_partition(system.bootstrap, events_topic))
    assert sum(n for p, n in counts.items() if p >= BEFORE) > 0, counts  # the split is real

    # Two workers drain the old and the new partitions side by side.
    system.start_service("fanout-worker")
    second = system.start_worker_replica(1)
    try:

        def expected(reader: str) -> set[str]:
            return {t for t, author in live.items() if (reader, author) in follows}

        def exact() -> bool:
            return all(sorted(api.home_ids(readers[x])) == sorted(expected(x)) for x in r)

        eventually(exact, timeout=120, interval=1, what="every home timeline exact after the split")
        # And it stays exact: nothing late (a slice, a purge) changes it.
        time.sleep(5)
        for reader in r:
            ids = api.home_ids(readers[reader])
            assert len(ids) == len(set(ids)), f"{reader}: duplicates"
            assert set(ids) == expected(reader), f"{reader}: {set(ids) ^ expected(reader)}"
    finally:
        system.stop_service(second)
        api.close()
