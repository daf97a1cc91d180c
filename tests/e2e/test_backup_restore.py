"""Backup and restore on both backends (docs/operations/backup.md).

Users, follows (one undone), tweets (one deleted) and the home timelines
they fan out to are written through the public API; ``fanline backup``
copies the storage services' data; social-graph and tweet-store are stopped
and their data destroyed (SQLite files deleted; keyspaces dropped);
``fanline restore`` writes it back and the two services start again. Every
userline, home timeline and follow list is then what it was, the sessions
still sign their users in, and the system serves and fans out: a new post
reaches its followers' home timelines, a new user can sign up and follow.

Cost (2 cores): ~15 s embedded; ~50 s on the real engines (a system start,
two keyspaces dropped and re-created); the refusals ~3 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from deploy.local.system import System

from .client import Api, eventually
from .conftest import make_system

pytestmark = [pytest.mark.e2e]

STORAGE = ("social-graph", "tweet-store")
BASE_PORT = {"embedded": 18300, "real": 28300}


def fanline(system: System, *args: str) -> str:
    done = subprocess.run(
        [str(Path(system.python).parent / "fanline"), *args], env=system.env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"fanline {' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def state(api: Api, people: list[tuple[str, str]]) -> dict[str, Any]:
    """What a user sees: their userline, home timeline and both follow lists."""
    seen: dict[str, Any] = {}
    for name, token in people:
        seen[name] = {
            "userline": [t["id"] for t in api.all_items(f"/v1/users/{name}/tweets")],
            "home": api.home_ids(token),
            "following": sorted(u["username"] for u in api.all_items(f"/v1/users/{name}/following")),
            "followers": sorted(u["username"] for u in api.all_items(f"/v1/users/{name}/followers")),
        }
    return seen


def populate(api: Api) -> list[tuple[str, str]]:
    people = [api.user("bk") for _ in range(5)]
    for i, (name, token) in enumerate(people):
        for other, _ in people[i + 1 :]:
            api.follow(token, name, other)
    first, first_token = people[0]
    api.unfollow(first_token, first, people[1][0])
    posted = {name: [api.post(token, f"before the backup: {name} #{n}")["id"] for n in range(3)] for name, token in people}
    last_name, last_token = people[-1]
    assert api.request("DELETE", f"/v1/tweets/{posted[last_name].pop()}", last_token).status_code == 204
    # Settled before the state is read: every live tweet in its author's and
    # each follower's home timeline. Waiting on one user's home only let the
    # others' rows land between the read of `before` and the backup (CI,
    # 2026-12-07: the second user's own three rows were written 0.2 s after
    # the first user's home was complete).
    follows = {name: {other for other, _ in people[i + 1 :]} for i, (name, _) in enumerate(people)}
    follows[first].discard(people[1][0])
    for name, token in people:
        expected = {t for author in follows[name] | {name} for t in posted[author]}
        eventually(lambda t=token, e=expected: set(api.home_ids(t)) == e, timeout=60, what=f"fan-out to {name}")  # type: ignore[misc]
    eventually(lambda: len(api.all_items(f"/v1/users/{last_name}/tweets")) == 2, timeout=30, what="the delete")
    return people


def destroy(system: System) -> None:
    """Every row of both storage services, gone."""
    env = system.env()
    prefix = env.get("FANLINE_KEYSPACE_PREFIX", "fanline")
    if system.backend != "cassandra":
        for owner in ("social_graph", "tweet_store"):
            for path in Path(env["FANLINE_DATA_DIR"]).glob(f"{prefix}_{owner}.sqlite3*"):
                path.unlink()
        return
    from cassandra.cluster import Cluster

    cluster = Cluster([env["FANLINE_CASSANDRA_HOSTS"]], port=int(env["FANLINE_CASSANDRA_PORT"]))
    try:
        session = cluster.connect()
        for owner in ("social_graph", "tweet_store"):
            session.execute(f"DROP KEYSPACE IF EXISTS {prefix}_{owner}", timeout=120)
    finally:
        cluster.shutdown()


@pytest.mark.parametrize("kind", ["embedded", pytest.param("real", marks=pytest.mark.real_infra)])
def test_backup_destroy_restore_gives_back_every_timeline_and_follow_list(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    infra = request.getfixturevalue("real_infra") if kind == "real" else None
    system = make_system(kind, BASE_PORT[kind], tmp_path, infra)
    system.start(timeout=180)
    api = Api(system.url())
    try:
        people = populate(api)
        before = state(api, people)
        backup = tmp_path / "backup"
        out = fanline(system, "backup", str(backup))
        assert "social-graph: backed up" in out and "tweet-store: backed up" in out, out

        for service in STORAGE:
            system.stop_service(service)
        destroy(system)
        out = fanline(system, "restore", str(backup))
        assert "tweet-store: restored" in out, out
        for service in STORAGE:
            system.start_service(service)
        system.wait_ready(timeout=120)

        assert state(api, people) == before
        # ...and it serves and fans out: a new post reaches its followers, a new user follows.
        author, author_token = people[2]
        fresh = api.post(author_token, "after the restore")["id"]
        for name, token in people:
            if author in before[name]["following"]:
                eventually(lambda token=token: fresh in api.home_ids(token), timeout=60, what=f"{name} gets the new post")  # type: ignore[misc]
        newcomer, newcomer_token = api.user("bk")
        api.follow(newcomer_token, newcomer, author)
        eventually(lambda: fresh in api.home_ids(newcomer_token), timeout=60, what="a new follower's home")
    finally:
        api.close()
        system.stop()


def test_restore_refuses_existing_data_and_a_backup_of_another_backend(tmp_path: Path) -> None:
    """Without --replace a restore never writes over data; a backup restores
    only into the backend it came from; a backup never writes into a
    non-empty directory. (No system needed: `fanline migrate` makes the files.)"""
    cli = str(Path(sys.executable).parent / "fanline")
    env = {**os.environ, "FANLINE_BACKEND": "embedded", "FANLINE_DATA_DIR": str(tmp_path / "data")}

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([cli, *args], env={**env, **extra}, capture_output=True, text=True, timeout=120)

    assert run("migrate").returncode == 0
    backup = str(tmp_path / "backup")
    assert run("backup", backup).returncode == 0
    done = run("restore", backup)
    assert done.returncode == 1 and "exists" in done.stderr, done.stderr
    done = run("restore", backup, FANLINE_BACKEND="cassandra")
    assert done.returncode == 1 and "embedded backup" in done.stderr, done.stderr
    done = run("backup", backup)
    assert done.returncode == 1 and "not empty" in done.stderr, done.stderr
    assert run("restore", backup, "--replace").returncode == 0
