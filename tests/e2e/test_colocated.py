"""The gateway with the storage services in its process (``colocate``,
FANLINE_HOSTED_SERVICES; docs/operations/scale.md, "One process or one per
service"), on the embedded stores and on real Cassandra and Kafka.

Everything a client does works as with one process per service; the
storage services still answer on their own ports (the fan-out worker writes
through them); the gateway's calls to them never leave the process (the
peer-call metrics count them, no connection to the stores' ports is made by
the gateway); and a SIGTERM of the one process, then a start, loses no post
that was acknowledged."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy.local.system import HOSTED, System

from .client import Api, eventually
from .conftest import make_system

pytestmark = [pytest.mark.e2e]


@pytest.fixture(
    scope="module",
    params=[
        "embedded",
        pytest.param("real", marks=pytest.mark.real_infra),
        # The worker with its fan-out replicas in its own process: two processes in all.
        pytest.param("real-replicas", marks=pytest.mark.real_infra),
    ],
)
def colocated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    kind = request.param.partition("-")[0]
    infra = request.getfixturevalue("real_infra") if kind == "real" else None
    port = {"embedded": 18700, "real": 28700, "real-replicas": 28750}[request.param]
    system = make_system(kind, port, tmp_path_factory.mktemp("colo"), infra)
    system.colocate, system.fanout_replica = True, request.param.endswith("replicas")
    system.start(timeout=180)
    yield system
    system.stop()


def _stores_connections(pid: int, ports: set[int]) -> list[int]:
    """Remote ports of ``pid``'s established TCP connections that are one of ``ports``."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if (found := re.fullmatch(r"socket:\[(\d+)\]", target)) is not None:
            inodes.add(found.group(1))
    remote = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and fields[9] in inodes:  # ESTABLISHED, one of this process's sockets
                port = int(fields[2].rsplit(":", 1)[1], 16)
                if port in ports:
                    remote.append(port)
    return remote


def _peer_calls(system: System) -> float:
    page = httpx.get(system.metrics_url("api"), timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in page.splitlines()
        if line.startswith("fanline_peer_request_duration_seconds_count") and 'service="api"' in line
    )


def test_two_processes_serve_every_service(colocated: System) -> None:
    assert set(colocated.procs) - {"broker"} == {"api", "fanout-worker"}
    for name in HOSTED:
        ready = httpx.get(colocated.url(name) + "/readyz", timeout=5)
        assert ready.status_code == 200, (name, ready.text)
        metrics = httpx.get(colocated.metrics_url(name), timeout=5)
        assert metrics.status_code == 200 and f'service="{name}"' in metrics.text


def _author_and_follower(api: Api, prefix: str) -> tuple[str, str, str, str]:
    """A new author and a new user following them: (author, their token, follower, their token)."""
    author, author_token = api.user(prefix + "a")
    reader, reader_token = api.user(prefix + "r")
    api.follow(reader_token, reader, author)
    return author, author_token, reader, reader_token


def test_a_post_reaches_a_followers_home_and_the_calls_stay_in_the_process(colocated: System) -> None:
    api = Api(colocated.url())
    try:
        author, author_token, reader, reader_token = _author_and_follower(api, "c")
        calls = _peer_calls(colocated)
        posted = api.post(author_token, "in one process", key=str(uuid.uuid4()))
        eventually(lambda: posted["id"] in api.home_ids(reader_token), what="the post in the follower's home")
        assert api.page(f"/v1/users/{author}/tweets")["items"][0]["id"] == posted["id"]
        assert _peer_calls(colocated) > calls  # the gateway did call the stores ...
        stores = {colocated.ports[name] for name in HOSTED}
        assert _stores_connections(colocated.procs["api"].pid, stores) == []  # ... not over a socket
        if colocated.fanout_replica:  # the worker wrote the home row through the stores in its own process
            assert _stores_connections(colocated.procs["fanout-worker"].pid, stores) == []
            worker_metrics = httpx.get(colocated.metrics_url("fanout-worker"), timeout=5).text
            assert 'fanline_http_requests_total{method="POST",route="/internal/home/add",service="tweet-store"' in worker_metrics
        # Errors cross the in-process boundary as they cross a socket.
        missing = api.request("GET", "/v1/tweets/00000000-0000-1000-8000-000000000000")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "tweet_not_found"
        refused = api.request("PUT", f"/v1/users/{reader}/following/{reader}", reader_token)
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "cannot_follow_self"
    finally:
        api.close()


def test_a_restart_of_the_one_process_loses_no_acknowledged_post(colocated: System) -> None:
    api = Api(colocated.url())
    try:
        author, author_token, _, reader_token = _author_and_follower(api, "s")
        posted: list[dict[str, Any]] = [api.post(author_token, f"before the restart {i}") for i in range(5)]
    finally:
        api.close()
    colocated.stop_service("api")  # SIGTERM: the gateway drains, then the stores stop
    colocated.start_service("api")
    colocated.wait_ready(120, services=("api", *HOSTED))
    api = Api(colocated.url())
    try:
        ids = {p["id"] for p in posted}
        eventually(lambda: ids <= set(api.home_ids(reader_token)), timeout=60, what="every acknowledged post delivered")
        assert ids <= {t["id"] for t in api.all_items(f"/v1/users/{author}/tweets")}
    finally:
        api.close()
