"""Large fan-outs are written in independently scheduled slices (the worker's
chunks topic): everyone gets the tweet exactly once, a follower who leaves
meanwhile keeps no row. The default e2e systems write slices of 10 followers
(``FAST_ENV``). Real Kafka only: with the in-memory embedded broker the worker
finishes every fan-out inline (a slice handed on to it would not outlive it)."""

from __future__ import annotations

import httpx
import pytest

from deploy.local.system import System

from .client import Api, eventually
from .test_large_accounts import metric


@pytest.mark.real_infra
def test_a_fan_out_in_slices_reaches_every_follower_exactly_once(real_system: System) -> None:
    system = real_system
    api = Api(system.url())
    author, author_token = api.user("sl")
    fans = [api.user("f") for _ in range(27)]
    for name, token in fans:
        api.follow(token, name, author)
    leaver, leaver_token = fans[-1]
    handed_on = metric(system, "fanout-worker", "fanline_fanout_chunks_total")
    tweet = api.post(author_token, "to every slice")["id"]
    api.unfollow(leaver_token, leaver, author)  # while the slices are being written
    for name, token in fans[:-1]:
        eventually(lambda token=token: api.home_ids(token).count(tweet) == 1, what=f"{name} has it once")
    eventually(lambda: tweet not in api.home_ids(leaver_token), what="the leaver keeps no row")
    stored = httpx.get(
        f"{system.url('tweet-store')}/internal/home/{leaver}", params={"limit": 50}, timeout=10, headers=system.internal_headers()
    )
    assert tweet not in [t["id"] for t in stored.json()["items"]]
    # (The follow merges may have delivered the tweet before the slices ran,
    # on a slow machine: wait for the slices themselves too.)
    eventually(
        lambda: metric(system, "fanout-worker", "fanline_fanout_chunks_total") >= handed_on + 2,
        what="27 followers written in slices of 10",
    )
    api.close()
