"""The ``fanline`` operator CLI against a running embedded system.

Each test runs the installed console script as an operator would, with the
system's environment (the same FANLINE_* variables the services read), and
checks the effect through the public or internal HTTP APIs.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

import httpx
import pytest

from deploy.local.system import System
from e2e.client import Api, eventually

from .support import VENV_BIN, produce, produce_poison

pytestmark = [pytest.mark.e2e]


def fanline(system: System, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENV_BIN / "fanline"), *args], env=system.env(), capture_output=True, text=True, timeout=timeout, check=False
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done.stdout


@pytest.fixture
def api(ops_system: System) -> Any:
    client = Api(ops_system.url())
    yield client
    client.close()


def test_help_lists_every_command(ops_system: System) -> None:
    out = ok(fanline(ops_system, "--help"))
    for command in ("migrate", "topics", "dlq", "rebuild-home", "sample-data", "backup", "restore"):
        assert command in out


def test_migrate_runs_both_services_migrations(ops_system: System) -> None:
    out = ok(fanline(ops_system, "migrate"))
    assert "social-graph: schema up to date (embedded)" in out
    assert "tweet-store: schema up to date (embedded)" in out
    # idempotent, and one service at a time
    assert ok(fanline(ops_system, "migrate", "--service", "tweet-store")).strip() == "tweet-store: schema up to date (embedded)"


def test_topics_ensure_and_verify(ops_system: System) -> None:
    for action in ("ensure", "verify"):
        out = ok(fanline(ops_system, "topics", action))
        assert "fanline.events: 8 partitions, replication factor 1, ok" in out
        assert "fanline.events.dlq: 8 partitions, replication factor 1, ok" in out


def test_topics_verify_fails_on_a_missing_topic(ops_system: System) -> None:
    env = {**ops_system.env(), "FANLINE_DLQ_TOPIC": f"missing.{uuid.uuid4().hex[:6]}"}
    done = subprocess.run(
        [str(VENV_BIN / "fanline"), "topics", "verify"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "MISSING" in done.stdout


def test_an_unreachable_broker_is_exit_code_2(ops_system: System) -> None:
    env = {**ops_system.env(), "FANLINE_KAFKA_BOOTSTRAP": "127.0.0.1:1"}
    done = subprocess.run(
        [str(VENV_BIN / "fanline"), "topics", "verify"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "kafka unavailable" in done.stderr


def test_sample_data_creates_users_follows_and_tweets(ops_system: System, api: Api) -> None:
    prefix = f"sd{uuid.uuid4().hex[:4]}_"
    done = fanline(
        ops_system,
        "sample-data",
        "--users",
        "6",
        "--follows-per-user",
        "2",
        "--tweets-per-user",
        "3",
        "--api",
        ops_system.url(),
        "--prefix",
        prefix,
        "--seed",
        "7",
        "--concurrency",
        "4",
    )
    out = ok(done)
    assert "6 users, 12 follows, 18 tweets" in out
    assert "100%" in done.stderr and "tweet" in done.stderr, "a progress bar on stderr"
    names = [f"{prefix}{i}" for i in range(6)]
    for name in names:
        profile = api.page(f"/v1/users/{name}")
        assert profile["following_count"] == 2, profile
        assert len(api.page(f"/v1/users/{name}/tweets")["items"]) == 3
    # the fan-out delivered them: a user's home timeline has their own tweets
    # and those of the two accounts they follow
    token = api.login(names[0], "sample-password")
    eventually(lambda: len(api.home_ids(token)) == 9, timeout=60, what="sample tweets fanned out")


def test_sample_data_is_rerunnable_with_the_same_prefix(ops_system: System) -> None:
    prefix = f"sr{uuid.uuid4().hex[:4]}_"
    args = (
        "sample-data",
        "--users",
        "3",
        "--follows-per-user",
        "1",
        "--tweets-per-user",
        "1",
        "--api",
        ops_system.url(),
        "--prefix",
        prefix,
        "--quiet",
    )
    ok(fanline(ops_system, *args))
    assert "3 users, 3 follows, 3 tweets" in ok(fanline(ops_system, *args))


def test_rebuild_home_restores_a_damaged_home_timeline(ops_system: System, api: Api) -> None:
    reader, reader_token = api.user("rb")
    authors = [api.user("rba") for _ in range(2)]
    for author, _ in authors:
        api.follow(reader_token, reader, author)
    tweets = [api.post(token, f"tweet {i} by {name}")["id"] for name, token in authors for i in range(3)]
    tweets.append(api.post(reader_token, "my own")["id"])
    eventually(lambda: set(api.home_ids(reader_token)) == set(tweets), timeout=60, what="initial fan-out")

    # lose rows (as if written to a replica that was later replaced)
    tweet_store = ops_system.url("tweet-store")
    for tweet_id in tweets[:5]:
        r = httpx.post(
            f"{tweet_store}/internal/home/remove",
            json={"tweet_id": tweet_id, "owners": [reader]},
            headers=ops_system.internal_headers(),
        )
        assert r.status_code == 204, r.text
    assert set(api.home_ids(reader_token)) == set(tweets[5:])

    out = ok(fanline(ops_system, "rebuild-home", reader))
    assert f"rebuilt the home timeline of {reader}: 7 row(s) merged from 3 author(s)" in out
    assert set(api.home_ids(reader_token)) == set(tweets)
    # idempotent: running it again changes nothing
    ok(fanline(ops_system, "rebuild-home", reader))
    assert sorted(api.home_ids(reader_token)) == sorted(tweets)


def test_rebuild_home_of_an_unknown_user_fails_cleanly(ops_system: System) -> None:
    done = fanline(ops_system, "rebuild-home", "nobody_at_all")
    assert done.returncode == 2
    assert "rebuild-home" in done.stderr and "Traceback" not in done.stderr


def dead_letters(system: System, key: str) -> list[dict[str, Any]]:
    out = ok(fanline(system, "dlq", "inspect", "--json"))
    letters = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [d for d in letters if d["key"] == key]


def test_dlq_inspect_shows_a_poison_message_with_its_error(ops_system: System) -> None:
    key = f"poison-{uuid.uuid4().hex[:8]}"
    produce_poison(ops_system.bootstrap, "fanline.events", key)
    eventually(lambda: bool(dead_letters(ops_system, key)), timeout=60, what="poison message dead-lettered")
    (letter,) = dead_letters(ops_system, key)
    assert letter["headers"]["error.reason"] == "invalid_event"
    assert "invalid event" in letter["headers"]["error.detail"]
    assert letter["headers"]["origin.topic"] == "fanline.events"
    assert key in letter["payload"]
    # the text form names the same things, and reading commits nothing
    text = ok(fanline(ops_system, "dlq", "inspect"))
    assert f"key:     {key}" in text and "error.reason:" in text
    assert len(dead_letters(ops_system, key)) == 1
    limited = ok(fanline(ops_system, "dlq", "inspect", "--json", "--limit", "1"))
    assert len(limited.splitlines()) == 1


def test_dlq_replay_republishes_to_the_events_topic(ops_system: System) -> None:
    key = f"replay-{uuid.uuid4().hex[:8]}"
    produce_poison(ops_system.bootstrap, "fanline.events", key)
    eventually(lambda: len(dead_letters(ops_system, key)) == 1, timeout=60, what="poison message dead-lettered")

    dry = ok(fanline(ops_system, "dlq", "replay", "--reason", "invalid_event", "--dry-run"))
    assert "would replay" in dry
    assert len(dead_letters(ops_system, key)) == 1

    # Replaying sends the message through the events topic and the worker
    # again; still poison, it comes back to the DLQ from a new events offset.
    out = ok(fanline(ops_system, "dlq", "replay", "--reason", "invalid_event"))
    assert "replaying" in out
    eventually(lambda: len(dead_letters(ops_system, key)) == 2, timeout=60, what="replayed message dead-lettered again")
    first, second = dead_letters(ops_system, key)
    assert first["payload"] == second["payload"]
    assert first["headers"]["origin.offset"] != second["headers"]["origin.offset"]


def test_dlq_replay_of_a_recoverable_event_is_applied(ops_system: System, api: Api) -> None:
    """A valid event that was dead-lettered while something was broken (here:
    parked in the DLQ by hand, with the worker's headers) is applied when
    replayed: a Followed event whose follow exists merges the followee's
    tweets into the follower's home timeline.

    The follow's own event cannot be suppressed (the social-graph outbox
    guarantees it is published), so the test lets it merge, then removes the
    row directly in tweet-store, as if that merge had been lost."""
    follower, follower_token = api.user("rf")
    followee, followee_token = api.user("re")
    tweet = api.post(followee_token, "posted before the follow")["id"]
    api.follow(follower_token, follower, followee)
    eventually(lambda: tweet in api.home_ids(follower_token), timeout=60, what="follow merged")
    r = httpx.post(
        f"{ops_system.url('tweet-store')}/internal/home/remove",
        json={"tweet_id": tweet, "owners": [follower]},
        headers=ops_system.internal_headers(),
    )
    assert r.status_code == 204, r.text
    assert tweet not in api.home_ids(follower_token)

    event = {
        "type": "Followed",
        "version": 1,
        "event_id": str(uuid.uuid1()),
        "occurred_at": "2026-01-01T00:00:00Z",
        "data": {"follower": follower, "followee": followee},
    }
    headers = [
        ("error.reason", b"error"),
        ("error.detail", b"RuntimeError: simulated outage"),
        ("origin.topic", b"fanline.events"),
        ("origin.partition", b"0"),
        ("origin.offset", b"0"),
    ]
    produce(ops_system.bootstrap, "fanline.events.dlq", followee.lower().encode(), json.dumps(event).encode(), headers)
    assert len(dead_letters(ops_system, followee.lower())) == 1

    out = ok(fanline(ops_system, "dlq", "replay", "--reason", "error"))
    assert "replaying" in out
    eventually(lambda: tweet in api.home_ids(follower_token), timeout=60, what="replayed Followed merged")
