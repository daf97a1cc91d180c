"""Production's start order, on the real engines: the storage services run
no DDL (``FANLINE_SCHEMA_AT_START=wait``); they wait, not ready, until the
migrate step (`fanline migrate`, the Kubernetes Jobs, compose's init
containers) has brought their keyspaces to the version their code needs,
then serve. ~40 s.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from .client import Api, eventually
from .conftest import make_system

pytestmark = [pytest.mark.e2e, pytest.mark.real_infra]


def ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_services_wait_for_the_migrate_step_and_run_no_ddl(real_infra: Any, tmp_path: Path) -> None:
    system = make_system("real", 28400, tmp_path, real_infra, FANLINE_SCHEMA_AT_START="wait")
    env = system.env()
    keyspaces = [f"{env['FANLINE_KEYSPACE_PREFIX']}_{owner}" for owner in ("social_graph", "tweet_store")]
    try:
        for service in ("social-graph", "tweet-store"):
            system.start_service(service)
        time.sleep(6)
        assert not ready(system.url("social-graph")) and not ready(system.url("tweet-store")), "served without a schema"
        from cassandra.cluster import Cluster

        cluster = Cluster([env["FANLINE_CASSANDRA_HOSTS"]], port=int(env["FANLINE_CASSANDRA_PORT"]))
        try:
            assert not set(keyspaces) & set(cluster.connect().cluster.metadata.keyspaces), (
                "a waiting service created its keyspace"
            )
        finally:
            cluster.shutdown()
        migrated = subprocess.run(
            [str(Path(system.python).parent / "fanline"), "migrate"], env=env, capture_output=True, text=True, timeout=180
        )
        assert migrated.returncode == 0, migrated.stderr
        for service in ("social-graph", "tweet-store"):
            eventually(lambda service=service: ready(system.url(service)), timeout=60, interval=0.5, what=f"{service} ready")  # type: ignore[misc]
        for service in ("api", "fanout-worker"):
            system.start_service(service)
        system.wait_ready(timeout=120)
        api = Api(system.url())
        try:
            (author, token), (reader, reader_token) = api.user("w"), api.user("w")
            api.follow(reader_token, reader, author)
            tweet = api.post(token, "after a migrate job")["id"]
            eventually(lambda: tweet in api.home_ids(reader_token), timeout=60, what="fan-out")
        finally:
            api.close()
    finally:
        system.stop()
