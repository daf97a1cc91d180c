"""Cassandra paused (SIGSTOP) under a posting and reading user: the gateway
answers every request within its request deadline — 503 with Retry-After
while Cassandra is stalled, never a hang — loses nothing it acknowledged, and
recovers by itself once Cassandra resumes (issue 14: before the deadline,
every request hung until Cassandra came back, up to 30 s, and none carried
Retry-After).

Pauses the shared engine: run it under the engines' flock (HELPERS.md), and
Cassandra is resumed in a ``finally`` whatever happens.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from system import System

from .client import Api, eventually
from .conftest import make_system

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.real_infra, pytest.mark.fault]

PAUSE_S = 15.0
DEADLINE_S = 2.0  # policies.GATEWAY_REQUEST, the default
SLACK_S = 0.75  # scheduling on a shared 2-core machine


@pytest.fixture
def stall_system(real_infra: Any, tmp_path: Path) -> Iterator[System]:
    system = make_system("real", 26000, tmp_path, real_infra)
    system.start(timeout=180)
    yield system
    system.stop()


def cassandra_pid(real_infra: Any) -> int:
    if real_infra.control is None:
        pytest.fail("Cassandra is external (FANLINE_TEST_CASSANDRA): this test needs to pause it")
    pid = real_infra.control.cassandra.pid()
    assert pid, "no running Cassandra found by the launcher"
    return int(pid)


def test_paused_cassandra_is_refused_within_the_deadline_and_nothing_acknowledged_is_lost(
        stall_system: System, real_infra: Any) -> None:
    api = Api(stall_system.url())
    alice, alice_token = api.user("a")
    bob, bob_token = api.user("b")
    api.follow(bob_token, bob, alice)
    acknowledged: set[str] = {api.post(alice_token, "before the pause")["id"]}
    refused_keys: list[str] = []
    latencies: list[tuple[str, int, float]] = []
    http = httpx.Client(base_url=stall_system.url(), timeout=30)

    def timed(method: str, path: str, token: str, **kw: Any) -> httpx.Response:
        started = time.monotonic()
        response = http.request(method, path, headers={"Authorization": f"Bearer {token}", **kw.pop("headers", {})},
                                **kw)
        latencies.append((f"{method} {path}", response.status_code, time.monotonic() - started))
        return response

    pid = cassandra_pid(real_infra)
    os.kill(pid, signal.SIGSTOP)
    try:
        paused_at = time.monotonic()
        n = 0
        while time.monotonic() - paused_at < PAUSE_S:
            key = f"stall-{uuid.uuid4().hex[:12]}"
            posted = timed("POST", "/v1/tweets", alice_token, json={"body": f"during the pause {n}"},
                           headers={"Idempotency-Key": key})
            if posted.status_code == 201:
                acknowledged.add(posted.json()["id"])
            else:
                assert posted.status_code == 503, posted.text
                assert posted.headers.get("retry-after") == "1"
                refused_keys.append(key)
            read = timed("GET", "/v1/timeline", bob_token)
            assert read.status_code in (200, 503), read.text
            if read.status_code == 503:
                assert read.headers.get("retry-after") == "1"
            n += 1
    finally:
        os.kill(pid, signal.SIGCONT)

    slowest = max(latencies, key=lambda item: item[2])
    assert slowest[2] <= DEADLINE_S + SLACK_S, f"a request took {slowest[2]:.2f} s: {slowest}"
    assert any(status == 503 for _, status, _ in latencies), "Cassandra's pause was never noticed"

    # Recovery without restarting anything: posts succeed again.
    def posts_again() -> bool:
        response = http.post("/v1/tweets", json={"body": "after the pause"},
                             headers={"Authorization": f"Bearer {alice_token}"})
        if response.status_code == 201:
            acknowledged.add(response.json()["id"])
            return True
        return False

    eventually(posts_again, timeout=90, interval=1.0, what="posting works again after Cassandra resumed")
    # The client retries what was refused, with the same key: each yields one tweet.
    for key in refused_keys:
        retried = http.post("/v1/tweets", json={"body": "retried"},
                            headers={"Authorization": f"Bearer {alice_token}", "Idempotency-Key": key})
        assert retried.status_code in (200, 201), retried.text
        acknowledged.add(retried.json()["id"])
    eventually(lambda: acknowledged <= set(api.home_ids(bob_token, limit=100)), timeout=60,
               what=f"all {len(acknowledged)} acknowledged tweets in the follower's home timeline")
    userline = [t["id"] for t in api.all_items(f"/v1/users/{alice}/tweets")]
    assert len(userline) == len(set(userline)) == len(acknowledged), "a refused-then-retried post doubled"
    print(f"\nstalled Cassandra {PAUSE_S:.0f} s: {len(latencies)} requests, "
          f"{sum(1 for _, s, _ in latencies if s == 503)} refused (503), slowest {slowest[2]:.2f} s; "
          f"{len(acknowledged)} acknowledged tweets, all delivered")
    http.close()
    api.close()
