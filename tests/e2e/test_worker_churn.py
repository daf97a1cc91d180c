"""Fan-out workers replaced again and again under steady posting lose
nothing (the defect a CI run of the cluster's rolling upgrade found on
2026-12-06: 34 of 201 acknowledged tweets never reached their followers'
home timelines after both workers were replaced one at a time).

Two workers share the consumer group on the single-node engines; posters
tweet with an ``Idempotency-Key`` and readers read their home timelines
(``tests/e2e/cluster.Load``) while the workers are stopped and started one
after another (SIGTERM, as a rollout does, and SIGKILL, as a crash does),
each start and stop a rebalance of the events and chunks topics. Then every
acknowledged tweet must be in its author's userline and in every follower's
home timeline exactly once (``cluster.verify``), and the workers' commits
catch up with the log (no partition left behind an offset the consumer
refused to commit: ``fanline_fanout.offsets``). Real Kafka + Cassandra.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy.local.system import System, metrics_url_of

from .client import Api, eventually
from .cluster import Load, setup_users, verify
from .conftest import make_system

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.real_infra]

#: Each worker is replaced this many times, the two alternating.
ROUNDS = 4


@pytest.fixture
def churn_system(real_infra: Any, tmp_path: Path) -> Iterator[System]:
    # A short rebalance timeout and commits every 0.2 s: many generations
    # and many commits inside each one, where offsets could go wrong.
    system = make_system(
        "real",
        27400,
        tmp_path,
        real_infra,
        FANLINE_WORKER_REBALANCE_TIMEOUT_S="3",
        FANLINE_COMMIT_INTERVAL_S="0.2",
    )
    system.start(timeout=180)
    yield system
    system.stop()


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _lag(port: int) -> float:
    """The summed ``fanline_consumer_lag_messages`` of the worker on ``port``."""
    text = httpx.get(metrics_url_of(port), timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("fanline_consumer_lag_messages{"))


def test_workers_replaced_again_and_again_under_posting_lose_nothing(churn_system: System) -> None:
    s = churn_system
    api = Api(s.url())
    replica = s.start_worker_replica(1)
    replica_url = f"http://127.0.0.1:{s.ports['fanout-worker'] + 100}"
    eventually(lambda: _ready(replica_url), timeout=90, interval=0.5, what="the second worker joined")
    posters, readers = setup_users(api, posters=4, readers=3)
    load = Load(s.url(), posters, readers, post_interval_s=0.05, read_interval_s=0.5).start()
    steps: list[str] = []
    try:
        time.sleep(3)
        for i in range(ROUNDS):
            for name, url in (("fanout-worker", s.url("fanout-worker")), (replica, replica_url)):
                sig = signal.SIGKILL if i % 2 else signal.SIGTERM
                s.stop_service(name, sig)
                if name == replica:
                    s.start_worker_replica(1)
                else:
                    s.start_service(name)
                eventually(lambda url=url: _ready(url), timeout=90, interval=0.5, what=f"the new {name}")
                steps.append(f"{name} {signal.Signals(sig).name}")
                time.sleep(1.0)  # a few events into the new generation before the next rebalance
    finally:
        load.stop()
    lost, duplicated = verify(api, load, log_dir=s.log_dir)
    print(f"\nworker churn: {len(load.acked)} acknowledged, {lost} lost, {duplicated} duplicated; {', '.join(steps)}")
    assert len(load.acked) > 100, "the load never got going"
    assert (lost, duplicated, load.failed) == (0, 0, 0), load.errors[:20]
    # Committed up to the log's end: a commit held back for good (an ack the
    # consumer never counted) shows as lag that never drains.
    ports = (s.ports["fanout-worker"], s.ports["fanout-worker"] + 100)
    eventually(lambda: sum(_lag(p) for p in ports) == 0, timeout=60, interval=2, what="the workers' commits caught up")
