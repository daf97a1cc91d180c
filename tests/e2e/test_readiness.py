"""Readiness that matches the guarantees, and metrics off the public port
(issue #29 item 6), on a system of its own (embedded: its broker can be
stopped without touching anyone else's).

* Kafka stopped: the gateway stays ready -- ``/readyz`` is ``200`` with
  Kafka under ``degraded`` -- and a post is still accepted (its event waits
  in the outbox); a replica started with ``FANLINE_READY_REQUIRES_KAFKA=true``
  (the operator's opt-in) is not ready meanwhile. (That the outbox's events
  are delivered once Kafka is back is the real-engine fault test's part,
  tests/e2e/test_faults.py, which also checks the gateway stays ready.)
* social-graph stopped after tweet-store reached it: tweet-store stays ready,
  social-graph under ``degraded`` (home reads need it, tweets and userlines
  do not; the "never reached: not ready" half is a unit test).
* ``/metrics`` answers on every process's metrics port, and on no process's
  own port (tests/e2e/test_walking_skeleton.py checks every service on both
  backends).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from deploy.local.system import System

from .client import Api, eventually
from .conftest import make_system

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """One system for the module; each test restores what it stops."""
    system = make_system("embedded", 24000, tmp_path_factory.mktemp("readiness"))
    system.start()
    yield system
    system.stop()


def readyz(url: str) -> httpx.Response:
    return httpx.get(url + "/readyz", timeout=10)


def test_metrics_only_on_the_metrics_ports(system: System) -> None:
    for name in system.ports:
        assert httpx.get(system.url(name) + "/metrics", timeout=10).status_code == 404, name
        metrics = httpx.get(system.metrics_url(name), timeout=10)
        assert metrics.status_code == 200 and "fanline_build_info" in metrics.text, name
        assert httpx.get(system.metrics_url(name).replace("/metrics", "/healthz"), timeout=10).status_code == 404


def test_tweet_store_stays_ready_when_social_graph_goes_away_after_reaching_it(system: System) -> None:
    assert readyz(system.url("tweet-store")).json()["dependencies"] == ["social-graph", "storage"]
    system.stop_service("social-graph")
    r = readyz(system.url("tweet-store"))
    assert r.status_code == 200, r.text
    assert "social-graph" in r.json()["degraded"]
    system.start_service("social-graph")
    system.wait_ready(60, ("social-graph",))
    eventually(lambda: "degraded" not in readyz(system.url("tweet-store")).json(), what="social-graph reached again")


def test_the_gateway_stays_ready_while_kafka_is_down_unless_the_operator_opts_in(system: System) -> None:
    strict = system.start_api_replica(1, env={"FANLINE_READY_REQUIRES_KAFKA": "true"})
    api = Api(system.url())
    try:
        author, author_token = api.user("ready")
        assert readyz(system.url()).json().get("degraded") is None

        system.stop_broker()
        eventually(lambda: readyz(strict).status_code == 503, timeout=30, what="the opted-in replica not ready")
        refused = readyz(strict).json()
        assert refused["dependencies"] == {"kafka": "unavailable"}, refused
        for _ in range(3):
            r = readyz(system.url())
            assert r.status_code == 200, r.text
            assert r.json()["degraded"] == {"kafka": "unavailable"}
        tweet = api.post(author_token, "while Kafka is down")  # 201: the event waits in the outbox
        assert tweet["id"] in [t["id"] for t in api.page(f"/v1/users/{author}/tweets")["items"]]
    finally:
        api.close()
        system.start_broker()  # the worker stops in a second with a broker, in 20 without
