"""The fan-out worker delivers a TweetCreated only under the stored tweet's
author (issue #15): a forged or corrupted event naming someone else is
dropped, logged and counted, and writes no timeline row."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import REGISTRY

from fanline_shared.domain import new_timeuuid

from .test_fanout_handlers import created, make


def _forged() -> float:
    return REGISTRY.get_sample_value("fanline_events_forged_total", {"type": "TweetCreated"}) or 0.0


async def test_an_event_whose_author_differs_from_the_stored_tweet_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    handlers, social, tweets = make(30)
    social.followers["mallory"] = ["m1", "m2"]
    tweet_id = str(new_timeuuid())
    tweets.tweets.add(tweet_id)  # stored as star's tweet
    before = _forged()
    with caplog.at_level(logging.WARNING, logger="fanline_fanout.handlers"):
        await handlers.apply(created(tweet_id, author="mallory"))  # type: ignore[arg-type]
    assert tweets.rows == {}  # neither mallory's followers nor star's got it
    assert _forged() == before + 1
    assert any("stored author" in r.getMessage() for r in caplog.records)


async def test_the_author_check_is_case_insensitive_like_usernames() -> None:
    handlers, _, tweets = make(3)
    tweet_id = str(new_timeuuid())
    tweets.tweets.add(tweet_id)
    tweets.authors[tweet_id] = "Star"  # display case as stored
    await handlers.apply(created(tweet_id, author="star"))  # type: ignore[arg-type]
    assert sum(tweet_id in ids for ids in tweets.rows.values()) == 3 + 1
