"""Versioned event schemas on the ``fanline.events`` topic.

Every message is a JSON envelope::

    {"type": "TweetCreated", "version": 1, "event_id": "<uuid>",
     "occurred_at": "<rfc3339>", "data": {...}}

and its Kafka key is the canonical username of the *author* whose home-timeline
rows the event touches (the followee for Followed/Unfollowed). Keying by author
puts every event about one author on one partition, so the worker sees them in
order: a tweet's delete never overtakes its creation, an unfollow never
overtakes the follow. Consumers must ignore unknown fields and reject (to the
dead-letter topic) unknown types or versions. See docs/architecture.md.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from .domain import OutboxEvent, new_timeuuid, to_rfc3339, utcnow
from .logs import current_request_id

SCHEMA_VERSION = 1
# What a consumer of this release reads: its own version and the one before,
# so that during a rolling upgrade a new worker reads what old gateways and
# services still publish (and what waits in the topics and outboxes). An
# event of a version not here is dead-lettered, and can be replayed once
# every worker runs a release that reads it. When SCHEMA_VERSION becomes 2,
# keep 1 here and upgrade version-1 payloads in ``decode``; one release later
# drop 1. tests/unit/test_event_versions.py feeds the previous release's real
# events (tests/unit/data/events-0.1.0) to this worker.
READABLE_VERSIONS: tuple[int, ...] = tuple(v for v in (SCHEMA_VERSION - 1, SCHEMA_VERSION) if v >= 1)


class _Data(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class TweetCreatedData(_Data):
    tweet_id: uuid.UUID
    author: str
    created_at: datetime


class TweetDeletedData(_Data):
    tweet_id: uuid.UUID
    author: str
    # The tweet's Mastodon-compatible status id (tweet-store's sids.py), for
    # the gateway's Mastodon streams; absent in events written before it.
    sid: str | None = None


class FollowData(_Data):
    follower: str
    followee: str


class FanoutChunkData(_Data):
    """The rest of one tweet's fan-out: active followers after ``after``."""

    tweet_id: uuid.UUID
    author: str
    created_at: datetime
    after: str


class _Envelope(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")
    version: int
    event_id: uuid.UUID
    occurred_at: datetime

    @field_validator("version")
    @classmethod
    def _readable(cls, version: int) -> int:
        if version not in READABLE_VERSIONS:
            raise ValueError(f"schema version {version} is not one this release reads {READABLE_VERSIONS}")
        return version


class TweetCreated(_Envelope):
    type: Literal["TweetCreated"]
    data: TweetCreatedData


class TweetDeleted(_Envelope):
    type: Literal["TweetDeleted"]
    data: TweetDeletedData


class Followed(_Envelope):
    type: Literal["Followed"]
    data: FollowData


class Unfollowed(_Envelope):
    type: Literal["Unfollowed"]
    data: FollowData


class FanoutChunk(_Envelope):
    """Internal to the fan-out worker, on its chunks topic (never on the
    events topic): one independently scheduled slice of a large fan-out."""

    type: Literal["FanoutChunk"]
    data: FanoutChunkData


Event = Annotated[TweetCreated | TweetDeleted | Followed | Unfollowed | FanoutChunk, Field(discriminator="type")]
_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


class InvalidEvent(ValueError):
    """A message that can never be processed (goes to the dead-letter topic)."""


def decode(raw: bytes) -> Event:
    """Parse and validate one message value; raise ``InvalidEvent``."""
    try:
        return _ADAPTER.validate_json(raw)
    except ValidationError as exc:
        raise InvalidEvent(f"invalid event: {exc.errors(include_url=False)[:3]}") from None


def _envelope(kind: str, key: str, data: dict[str, object]) -> OutboxEvent:
    event_id = new_timeuuid()
    payload = orjson.dumps(
        {
            "type": kind,
            "version": SCHEMA_VERSION,
            "event_id": str(event_id),
            "occurred_at": to_rfc3339(utcnow()),
            "data": data,
        }
    )
    # The request (or event being handled) this event comes from, if any.
    return OutboxEvent(id=event_id, key=key, payload=payload, request_id=current_request_id())


def tweet_created(tweet_id: uuid.UUID, author: str, created_at: datetime) -> OutboxEvent:
    return _envelope(
        "TweetCreated",
        author.lower(),
        {"tweet_id": str(tweet_id), "author": author, "created_at": to_rfc3339(created_at)},
    )


def tweet_deleted(tweet_id: uuid.UUID, author: str, sid: str | None = None) -> OutboxEvent:
    data: dict[str, object] = {"tweet_id": str(tweet_id), "author": author}
    if sid is not None:
        data["sid"] = sid
    return _envelope("TweetDeleted", author.lower(), data)


def fanout_chunk(tweet_id: uuid.UUID, author: str, created_at: datetime, after: str) -> OutboxEvent:
    """Keyed by tweet and slice, so the slices of one fan-out spread over
    the chunks topic's partitions (and the workers that own them)."""
    return _envelope(
        "FanoutChunk",
        f"{tweet_id}:{after}",
        {"tweet_id": str(tweet_id), "author": author, "created_at": to_rfc3339(created_at), "after": after},
    )


def followed(follower: str, followee: str) -> OutboxEvent:
    return _envelope("Followed", followee.lower(), {"follower": follower, "followee": followee})


def unfollowed(follower: str, followee: str) -> OutboxEvent:
    return _envelope("Unfollowed", followee.lower(), {"follower": follower, "followee": followee})
