"""Event schemas: round trip, keys, and what goes to the dead-letter topic."""

from __future__ import annotations

import orjson
import pytest

from fanline_shared import events
from fanline_shared.domain import new_timeuuid, utcnow


def test_tweet_created_round_trip_and_key() -> None:
    tweet_id = new_timeuuid()
    out = events.tweet_created(tweet_id, "Alice", utcnow())
    assert out.key == "alice"
    event = events.decode(out.payload)
    assert isinstance(event, events.TweetCreated)
    assert event.data.tweet_id == tweet_id and event.data.author == "Alice" and event.version == 1


def test_follow_events_are_keyed_by_followee() -> None:
    # Keyed by the author whose rows they touch, so they share a partition
    # (and an order) with that author's tweets.
    assert events.followed("bob", "Alice").key == "alice"
    assert events.unfollowed("bob", "Alice").key == "alice"
    assert isinstance(events.decode(events.unfollowed("bob", "Alice").payload), events.Unfollowed)


def test_unknown_fields_are_ignored() -> None:
    raw = orjson.loads(events.tweet_deleted(new_timeuuid(), "a").payload)
    raw["extra"] = 1
    raw["data"]["also"] = 2
    assert isinstance(events.decode(orjson.dumps(raw)), events.TweetDeleted)


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"{",
        b"[]",
        b'{"type": "Nope", "version": 1}',
        orjson.dumps(
            {
                "type": "TweetCreated",
                "version": 2,
                "event_id": str(new_timeuuid()),
                "occurred_at": "2026-01-01T00:00:00Z",
                "data": {},
            }
        ),
        orjson.dumps(
            {
                "type": "TweetDeleted",
                "version": 1,
                "event_id": "x",
                "occurred_at": "2026-01-01T00:00:00Z",
                "data": {"tweet_id": "nope", "author": "a"},
            }
        ),
    ],
    ids=["empty", "truncated", "array", "unknown-type", "future-version", "bad-fields"],
)
def test_invalid_events_raise_invalid_event(payload: bytes) -> None:
    with pytest.raises(events.InvalidEvent):
        events.decode(payload)
