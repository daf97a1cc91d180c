"""Two-worker correctness (issue #13): a second worker joins — a rebalance of
the events and chunks topics — in the middle of a 20,000-follower fan-out
while one follower unfollows. Every other follower ends with the tweet
exactly once, and no stale row survives for the one who left.

Followers are bulk-loaded into social-graph's tables the way the benchmark
does (``bench/seed.py``: the same rows social-graph writes, including the
active-followers index), not signed up: 20,000 argon2 hashes and LWTs would
take minutes without testing anything here. Real Kafka + Cassandra only.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy.local.system import System

from .client import Api, eventually
from .conftest import make_system

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.real_infra]

FOLLOWERS = 20_000


@pytest.fixture
def rebalance_system(real_infra: Any, tmp_path: Path) -> Iterator[System]:
    # Push path only (no read-time merge at 20,000), slices of 2,000, and a
    # quick rebalance when the second worker joins.
    system = make_system(
        "real",
        26000,
        tmp_path,
        real_infra,
        FANLINE_HYBRID_FANOUT="false",
        FANLINE_FANOUT_CHUNK="2000",
        FANLINE_FANOUT_PAGE_SIZE="500",
        FANLINE_WORKER_REBALANCE_TIMEOUT_S="3",
    )
    system.start(timeout=180)
    yield system
    system.stop()


def seed(infra: Any, keyspace: str, author: str) -> list[str]:
    from cassandra.cluster import Cluster

    from bench import seed as bench_seed

    graph = bench_seed.Graph(tag=secrets.token_hex(3), followers={author: FOLLOWERS})
    cluster = Cluster([infra.cassandra_host], port=infra.cassandra_port)
    try:
        bench_seed.bulk_load_social_graph(cluster.connect(), keyspace, graph)
    finally:
        cluster.shutdown()
    return graph.followers_of(author)


async def home_counts(system: System, owners: list[str], tweet_id: str) -> dict[str, int]:
    async with httpx.AsyncClient(timeout=30, headers=system.internal_headers()) as client:
        sem = asyncio.Semaphore(32)

        async def one(owner: str) -> tuple[str, int]:
            async with sem:
                r = await client.get(f"{system.url('tweet-store')}/internal/home/{owner}", params={"limit": 20})
                r.raise_for_status()
                return owner, [t["id"] for t in r.json()["items"]].count(tweet_id)

        return dict(await asyncio.gather(*(one(o) for o in owners)))


def test_a_rebalance_mid_fan_out_with_an_unfollow_leaves_no_stale_row(rebalance_system: System, real_infra: Any) -> None:
    system = rebalance_system
    api = Api(system.url())
    author, author_token = api.user("cel")
    keyspace = f"{system.extra_env['FANLINE_KEYSPACE_PREFIX']}_social_graph"
    followers = seed(real_infra, keyspace, author)
    assert api.page(f"/v1/users/{author}")["followers_count"] == FOLLOWERS
    leaver = followers[-3]  # in the last slice: written after the rebalance
    from bench.seed import POOL_PASSWORD

    leaver_token = api.login(leaver, POOL_PASSWORD)

    tweet = api.post(author_token, "to twenty thousand")["id"]
    # Some rows are written: the fan-out is under way. Then a second worker joins.
    eventually(
        lambda: asyncio.run(home_counts(system, followers[:1], tweet))[followers[0]] == 1,
        timeout=60,
        interval=0.05,
        what="the fan-out started",
    )
    second = system.start_worker_replica(1)
    try:
        api.unfollow(leaver_token, leaver, author)
        eventually(
            lambda: asyncio.run(home_counts(system, followers[-1:], tweet))[followers[-1]] == 1,
            timeout=300,
            interval=1,
            what="the last follower has the tweet",
        )
        time.sleep(3)  # let any late slice or purge land
        sample = followers[:200] + followers[-400:]
        counts = asyncio.run(home_counts(system, sample, tweet))
        wrong = {o: n for o, n in counts.items() if n != (0 if o == leaver else 1)}
        assert not wrong, f"{len(wrong)} followers wrong: {dict(list(wrong.items())[:10])}"
        assert tweet not in api.home_ids(leaver_token)
    finally:
        system.stop_service(second)
        api.close()
