"""The gateway's cache of verified sessions (issue 31), end to end on both
backends: a token verified a moment ago costs no call to social-graph, and a
log-out on one gateway replica is refused by another replica that had the
token cached, once the ``SessionRevoked`` event reaches it (api.md: "the
token is refused from then on")."""

from __future__ import annotations

import time

import httpx

from deploy.local.system import System, metrics_url_of

from .client import Api

REVOKED_WITHIN_S = 2.0


def cache_hits(base_url: str) -> float:
    """The session cache's hits on the gateway at ``base_url`` (its metrics port)."""
    text = httpx.get(metrics_url_of(int(base_url.rsplit(":", 1)[1])), timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('fanline_session_cache_lookups_total{result="hit"}')
    )


def sessions_asked(system: System) -> float:
    text = httpx.get(system.metrics_url("social-graph"), timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("fanline_http_requests_total{")
        and 'route="/internal/sessions/current"' in line
        and 'method="GET"' in line
    )


def cached_on(base_url: str, token: str, deadline_s: float = 30.0) -> None:
    """Use ``token`` on that gateway until it is answered from its cache (a
    fresh replica serves from its cache only once its event tap is connected)."""
    other = Api(base_url)
    try:
        deadline = time.monotonic() + deadline_s
        while True:
            before = cache_hits(base_url)
            assert other.request("GET", "/v1/timeline", token).status_code == 200
            if cache_hits(base_url) > before:
                return
            assert time.monotonic() < deadline, f"{base_url} never answered {token[:6]}… from its cache"
            time.sleep(0.2)
    finally:
        other.close()


def test_a_verified_token_costs_no_call_to_social_graph(api: Api, system: System) -> None:
    _, token = api.user("sc")
    cached_on(system.url(), token)
    asked = sessions_asked(system)
    for _ in range(5):
        assert api.request("GET", "/v1/timeline", token).status_code == 200
        assert api.request("POST", "/v1/tweets", token, json={"body": "cached"}).status_code == 201
    assert sessions_asked(system) == asked


def test_a_token_revoked_on_one_replica_is_refused_by_another(api: Api, system: System) -> None:
    replica = system.start_api_replica(1) if "api-1" not in system.procs else system.replica_url(1)
    _, token = api.user("rv")
    _, kept = api.user("rk")
    cached_on(replica, token)
    cached_on(replica, kept)
    assert api.request("DELETE", "/v1/sessions/current", token).status_code == 204
    # Refused at once where it was revoked...
    assert api.request("GET", "/v1/timeline", token).status_code == 401
    # ...and on the replica that had it cached, once the event arrives.
    other = Api(replica)
    try:
        deadline = time.monotonic() + REVOKED_WITHIN_S
        while (status := other.request("GET", "/v1/timeline", token).status_code) != 401:
            assert status == 200
            assert time.monotonic() < deadline, f"the other replica still accepted a revoked token after {REVOKED_WITHIN_S}s"
            time.sleep(0.05)
        assert other.request("GET", "/v1/timeline", kept).status_code == 200
    finally:
        other.close()
