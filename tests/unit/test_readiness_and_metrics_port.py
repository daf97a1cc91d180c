"""Readiness that matches the guarantees, and metrics on a port of their own
(issue #29 item 6).

* ``/readyz`` fails on a required dependency and only reports a degraded one
  (``http_routes.Degraded``), naming it without details on a public port;
* tweet-store is not ready until it has reached social-graph once (a
  NetworkPolicy or URL mistake stalls a rollout instead of serving home
  reads that fail); once reached, an outage only degrades it (the end-to-end
  half: tests/e2e/test_readiness.py);
* ``MetricsPort`` answers ``/metrics`` only on the metrics port, and the
  service's own port (the gateway's is the public one) serves none.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from fanline_shared.config import Env, HttpSettings
from fanline_shared.errors import Unavailable
from fanline_shared.http_routes import Degraded, ops_routes
from fanline_shared.http_server import MetricsPort


def app_with_checks(public: bool, **outcomes: Exception | None) -> Starlette:
    def check(outcome: Exception | None):  # type: ignore[no-untyped-def]
        async def run() -> None:
            if outcome is not None:
                raise outcome

        return run

    return Starlette(routes=ops_routes("svc", {name: check(o) for name, o in outcomes.items()}, public=public))


@pytest.mark.parametrize("public", [False, True])
def test_a_degraded_dependency_is_reported_but_the_service_stays_ready(public: bool) -> None:
    app = app_with_checks(public, storage=None, kafka=Degraded("kafka unreachable at 10.0.0.7:9092"))
    with TestClient(app) as client:
        r = client.get("/readyz")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "ready" and body["dependencies"] == ["kafka", "storage"]
    assert body["degraded"] == {"kafka": "unavailable" if public else "kafka unreachable at 10.0.0.7:9092"}
    assert ("10.0.0.7" in r.text) is not public  # a public port names no internal address


def test_a_required_dependency_fails_readiness_and_the_degraded_one_is_named_too() -> None:
    app = app_with_checks(True, storage=Unavailable("cassandra down at 10.0.0.8"), kafka=Degraded("x"))
    with TestClient(app) as client:
        r = client.get("/readyz")
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert r.json()["dependencies"] == {"storage": "unavailable"} and r.json()["degraded"] == {"kafka": "unavailable"}
    assert "10.0.0.8" not in r.text


def test_tweet_store_is_not_ready_until_it_has_reached_social_graph(tmp_path: Path) -> None:
    from fanline_tweet_store.app import create_app
    from fanline_tweet_store.config import Settings

    settings = Settings.from_env(
        {"FANLINE_DATA_DIR": str(tmp_path), "FANLINE_SOCIAL_GRAPH_URL": "http://127.0.0.1:9", "FANLINE_PEER_TIMEOUT_S": "1"}
    )
    with TestClient(create_app(settings)) as client:
        r = client.get("/readyz")
    assert r.status_code == 503, r.text
    assert set(r.json()["dependencies"]) == {"social-graph"}  # its own storage answers


def metrics_app() -> Starlette:
    async def hello(_: Request) -> Response:
        return Response("hello")

    return Starlette(routes=[Route("/v1/hello", hello), *ops_routes("svc", {})])


def test_metrics_are_served_on_the_metrics_port_only() -> None:
    # TestClient's requests arrive on port 80 (scope["server"]): here that is the metrics port.
    with TestClient(MetricsPort(metrics_app(), 80)) as on_metrics_port:
        r = on_metrics_port.get("/metrics")
        assert r.status_code == 200 and "fanline_http_requests_total" in r.text
        assert r.headers["content-type"].startswith("text/plain")
        assert on_metrics_port.get("/v1/hello").status_code == 404  # nothing else there
        assert on_metrics_port.get("/healthz").status_code == 404
    # ... and here the service's own port: everything but /metrics.
    with TestClient(MetricsPort(metrics_app(), 8050)) as on_service_port:
        assert on_service_port.get("/v1/hello").text == "hello"
        assert on_service_port.get("/healthz").status_code == 200
        assert on_service_port.get("/metrics").status_code == 404


def test_the_metrics_port_is_the_service_port_plus_50_unless_set() -> None:
    assert HttpSettings.from_env(Env({}), "API", 8000).metrics_port == 8050
    assert HttpSettings.from_env(Env({"FANLINE_API_PORT": "8006"}), "API", 8000).metrics_port == 8056
    assert HttpSettings.from_env(Env({"FANLINE_WORKER_METRICS_PORT": "9100"}), "WORKER", 8003).metrics_port == 9100
