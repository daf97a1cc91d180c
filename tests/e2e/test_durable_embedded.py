"""The embedded default (``make run``: SQLite + the in-memory tansu broker)
loses nothing it acknowledged, whatever stops (issue 14).

tansu keeps messages in memory only, so an event the broker acknowledged is
gone when it stops. The embedded default therefore keeps each outbox row
until the fan-out worker has *applied* its event (``FANLINE_OUTBOX_ACK=applied``,
set by deploy/local/system.py) and replays the unapplied rows at start.

Every case runs a lagging worker (SIGSTOP), so acknowledged writes exist only
in the outbox and the broker's memory when something dies; then everything
stops as ``make run`` does (its supervisor stops all processes when one dies,
or on Ctrl-C) and starts again on the same data directory.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from deploy.local.system import System

from .client import Api, eventually
from .conftest import FAST_ENV, PORT_OFFSET

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.fault]

BASE = 19700 + PORT_OFFSET


def embedded(data_dir: Path, tag: str, **extra: str) -> System:
    from .conftest import ARTIFACTS

    return System(
        data_dir=data_dir, base_port=BASE, extra_env={**FAST_ENV, **extra}, log_dir=ARTIFACTS / "logs" / f"durable-{tag}"
    )


def pause(system: System, name: str) -> None:
    os.killpg(system.procs[name].pid, signal.SIGSTOP)


def wait_published(system: System, seconds: float = 2.5) -> None:
    """Give the gateway's fast path (and the relay) time to hand every event
    to the broker: the case where only the broker's memory still has them."""
    time.sleep(seconds)


def restart(system: System, data_dir: Path, tag: str) -> System:
    """Ctrl-C as make run's supervisor does it (the paused worker is killed:
    it would ignore SIGTERM), then ``make run`` again on the same data."""
    system.kill_service("fanout-worker")
    system.stop()
    again = embedded(data_dir, tag + "-2")
    again.start()
    return again


def test_tweets_posted_while_the_worker_lags_survive_ctrl_c(tmp_path: Path) -> None:
    """The issue's scenario: follow, pause the worker, post 5 tweets (201),
    stop the worker, Ctrl-C, start again: 5 of 5 reach the follower."""
    data = tmp_path / "data"
    system = embedded(data, "ctrl-c")
    system.start()
    try:
        api = Api(system.url())
        alice, alice_token = api.user("a")
        bob, bob_token = api.user("b")
        api.follow(bob_token, bob, alice)
        warm = api.post(alice_token, "before the pause")["id"]
        eventually(lambda: warm in api.home_ids(bob_token), what="worker caught up")
        pause(system, "fanout-worker")
        posted = [api.post(alice_token, f"lagging {i}")["id"] for i in range(5)]
        wait_published(system)
        api.close()
        system = restart(system, data, "ctrl-c")
        api = Api(system.url())
        bob_token = api.login(bob)
        eventually(
            lambda: set(posted) <= set(api.home_ids(bob_token)),
            timeout=60,
            what="5 of 5 lagging tweets in the follower's home timeline",
        )
        home = api.home_ids(bob_token)
        assert len(home) == len(set(home)) == 6
        api.close()
    finally:
        system.stop()


@pytest.mark.parametrize("victim", ["fanout-worker", "api", "tweet-store", "social-graph", "broker"])
def test_every_acknowledged_write_takes_effect_after_kill_9(tmp_path: Path, victim: str) -> None:
    """Tweet, delete, follow and unfollow acknowledged while the worker lags;
    then SIGKILL of one process, everything stops and starts again: each
    write has taken effect in the home timelines."""
    data = tmp_path / "data"
    system = embedded(data, f"kill-{victim}")
    system.start()
    try:
        api = Api(system.url())
        alice, alice_token = api.user("a")
        bob, bob_token = api.user("b")  # follows alice throughout
        carol, carol_token = api.user("c")  # follows alice while the worker lags
        dave, dave_token = api.user("d")  # unfollows alice while the worker lags
        api.follow(bob_token, bob, alice)
        api.follow(dave_token, dave, alice)
        doomed = api.post(alice_token, "deleted while the worker lags")["id"]
        eventually(lambda: doomed in api.home_ids(bob_token) and doomed in api.home_ids(dave_token), what="worker caught up")

        pause(system, "fanout-worker")
        posted = [api.post(alice_token, f"lagging {i}")["id"] for i in range(2)]
        assert api.request("DELETE", f"/v1/tweets/{doomed}", alice_token).status_code == 204
        api.follow(carol_token, carol, alice)
        api.unfollow(dave_token, dave, alice)
        wait_published(system)
        api.close()
        if victim == "fanout-worker":
            system.kill_service(victim)
        elif victim == "broker":
            os.killpg(system.procs["broker"].pid, signal.SIGKILL)
        else:
            system.kill_service(victim)
        system = restart(system, data, f"kill-{victim}")

        api = Api(system.url())
        tokens = {name: api.login(name) for name in (bob, carol, dave)}
        want = {bob: set(posted), carol: set(posted), dave: set()}

        def settled() -> bool:
            return all(set(api.home_ids(tokens[name])) == ids for name, ids in want.items())

        eventually(
            settled,
            timeout=60,
            what=f"every write applied after kill -9 of {victim}: " + str({n: api.home_ids(t) for n, t in tokens.items()}),
        )
        api.close()
    finally:
        system.stop()
