"""Degraded operation: a dependency down is a clean 503 naming it (with
Retry-After), never a 500, and nothing is half-done; the rate limiter answers
429 with Retry-After."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from deploy.local.system import System

from .client import Api, eventually
from .conftest import make_system

pytestmark = [pytest.mark.e2e]


@pytest.fixture
def small_system(tmp_path: Path) -> Iterator[System]:
    system = make_system("embedded", 19500, tmp_path, FANLINE_RATE_LIMIT_PER_ADDRESS="40 per minute")
    system.start()
    yield system
    system.stop()


def test_dependency_down_is_503_naming_it_and_recovers(small_system: System) -> None:
    api = Api(small_system.url())
    me, token = api.user()
    small_system.stop_service("tweet-store")

    for method, path, body in (("GET", "/v1/public", None), ("POST", "/v1/tweets", {"body": "x"}), ("GET", "/v1/timeline", None)):
        r = api.request(method, path, token, json=body)
        assert r.status_code == 503, (path, r.text)
        assert r.json()["error"]["code"] == "unavailable" and "tweet-store" in r.json()["error"]["message"]
        assert int(r.headers["Retry-After"]) >= 1
    ready = httpx.get(small_system.url() + "/readyz")
    assert ready.status_code == 503 and "tweet-store" in ready.json()["error"]["message"]
    # The public port names the dependency, not where it lives (issue #15);
    # the internal ports keep the details.
    assert "127.0.0.1" not in ready.text and str(small_system.ports["tweet-store"]) not in ready.text, ready.text

    small_system.start_service("tweet-store")
    small_system.wait_ready(60, ("tweet-store",))
    eventually(lambda: httpx.get(small_system.url() + "/readyz").status_code == 200, what="gateway ready again")
    assert api.page(f"/v1/users/{me}/tweets")["items"] == []  # the failed post left nothing behind
    api.post(token, "back")
    api.close()


def test_rate_limit_is_429_with_retry_after(small_system: System) -> None:
    statuses = []
    with httpx.Client(base_url=small_system.url()) as client:
        for _ in range(60):
            r = client.get("/v1/public")
            statuses.append(r.status_code)
            if r.status_code == 429:
                assert r.json()["error"]["code"] == "rate_limited"
                assert int(r.headers["Retry-After"]) >= 1
                break
        assert client.get("/healthz").status_code == 200  # operations endpoints are never limited
    assert 429 in statuses and statuses.count(200) >= 40
