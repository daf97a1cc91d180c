"""Live timelines: the open streams of this gateway process and the routing of
events to them (api.md "Live updates — server-sent events").

Every gateway replica sees *every* event (``tap.py`` reads the whole events
topic without a consumer group), so a stream works whichever replica holds it
and nothing has to know where a user is connected. Routing is by author:

- a home stream listens to its owner and to everyone its owner follows (the
  owner's following list is read from social-graph when the stream opens,
  kept current by Followed/Unfollowed events, and re-read periodically);
  tweets of large accounts are not fanned out on write but their
  TweetCreated event reaches the followers' streams just the same;
- a public stream listens to every author.

TweetCreated becomes ``update`` (the tweet is read from tweet-store once per
event, whatever the number of streams); TweetDeleted becomes ``delete`` for
the same audience; Unfollowed sends the unfollower's streams a ``delete`` for
each of the unfollowed author's newest ``UNFOLLOW_DELETES`` tweets (clients
ignore ids they do not show). Follow merges send nothing (api.md).

A stream's queue is bounded: a client too slow to keep up is disconnected and
resumes with ``Last-Event-ID``, instead of growing the gateway's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from fanline_shared import metrics
from fanline_shared.domain import canonical
from fanline_shared.errors import DomainError, NotFound, RateLimited
from fanline_shared.events import Event, Followed, TweetCreated, TweetDeleted, Unfollowed
from fanline_shared.peers import SocialGraphClient, TweetStoreClient

from .config import LiveSettings

log = logging.getLogger(__name__)

UNFOLLOW_DELETES = 100
QUEUE_MAX = 256
# Resume backlog: pages read from tweet-store and the most items replayed.
BACKLOG_PAGE = 100
BACKLOG_MAX = 1000


@dataclass(frozen=True, slots=True)
class Item:
    """One event for a client: ``event`` is "update" or "delete"."""

    event: str
    data: str
    id: str | None = None
    created_at: float | None = None  # the tweet's creation time, for the latency histogram


# Ends a stream (shutdown or overflow); the client reconnects with Last-Event-ID.
CLOSE = Item("close", "")


@dataclass(eq=False, slots=True)
class Stream:
    kind: str  # "home" or "public"
    owner: str | None  # canonical username of a home stream
    queue: asyncio.Queue[Item] = field(default_factory=lambda: asyncio.Queue(QUEUE_MAX))
    following: frozenset[str] = frozenset()
    closed: bool = False

    def offer(self, item: Item) -> None:
        if self.closed:
            return
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            # Too slow: drop what is queued and end the stream; it resumes
            # from Last-Event-ID on reconnect and misses nothing.
            log.info("stream of %s overflowed; disconnecting it", self.owner or "public")
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(CLOSE)
            self.closed = True


def tweet_item(tweet: dict[str, Any]) -> Item:
    created = datetime.fromisoformat(str(tweet["created_at"]).replace("Z", "+00:00")).timestamp()
    return Item("update", orjson.dumps(tweet).decode(), str(tweet["id"]), created)


def delete_item(tweet_id: str) -> Item:
    return Item("delete", orjson.dumps({"id": tweet_id}).decode())


class Hub:
    """The open streams of this process, indexed by the authors they listen to."""

    def __init__(self, settings: LiveSettings, social: SocialGraphClient, tweets: TweetStoreClient) -> None:
        self.settings = settings
        self.social = social
        self.tweets = tweets
        self._by_owner: dict[str, set[Stream]] = {}
        self._audience: dict[str, set[Stream]] = {}  # author -> home streams listening to them
        self._public: set[Stream] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._refresher: asyncio.Task[None] | None = None

    # --- opening and closing -------------------------------------------------------

    def streams_of(self, owner: str) -> int:
        return len(self._by_owner.get(canonical(owner), ()))

    @property
    def open_streams(self) -> int:
        return sum(len(s) for s in self._by_owner.values()) + len(self._public)

    async def open_home(self, owner: str) -> Stream:
        """Register a home stream (counted at once, so the limit holds even
        while following lists load), then listen to its owner's authors."""
        owner = canonical(owner)
        mine = self._by_owner.setdefault(owner, set())
        if len(mine) >= self.settings.max_streams_per_user:
            raise RateLimited(f"at most {self.settings.max_streams_per_user} streams per user",
                              code="too_many_streams", retry_after=5)
        stream = Stream("home", owner)
        mine.add(stream)
        metrics.STREAMS_OPEN.labels("home").inc()
        try:
            following = await self.social.following_all(owner)
        except BaseException:
            self.close(stream)
            raise
        if not stream.closed:
            self._listen(stream, following)
        return stream

    def open_public(self) -> Stream:
        stream = Stream("public", None)
        self._public.add(stream)
        metrics.STREAMS_OPEN.labels("public").inc()
        return stream

    def close(self, stream: Stream) -> None:
        """Forget a stream (idempotent)."""
        if stream.kind == "public":
            if stream in self._public:
                self._public.discard(stream)
                metrics.STREAMS_OPEN.labels("public").dec()
            stream.closed = True
            return
        assert stream.owner is not None
        mine = self._by_owner.get(stream.owner)
        if mine is None or stream not in mine:
            stream.closed = True
            return
        mine.discard(stream)
        if not mine:
            del self._by_owner[stream.owner]
        self._unlisten(stream, stream.following | {stream.owner})
        stream.closed = True
        metrics.STREAMS_OPEN.labels("home").dec()

    def _listen(self, stream: Stream, following: Iterable[str]) -> None:
        assert stream.owner is not None
        # Interned: 1,000 streams following the same accounts share the strings.
        names = frozenset(sys.intern(canonical(n)) for n in following)
        self._unlisten(stream, stream.following - names)
        stream.following = names
        for author in names | {stream.owner}:
            self._audience.setdefault(author, set()).add(stream)

    def _unlisten(self, stream: Stream, authors: Iterable[str]) -> None:
        for author in authors:
            if author == stream.owner and stream in self._by_owner.get(author, ()):
                continue  # an owner always hears themself while the stream is open
            listeners = self._audience.get(author)
            if listeners is not None:
                listeners.discard(stream)
                if not listeners:
                    del self._audience[author]

    # --- events ----------------------------------------------------------------------

    async def dispatch(self, events: list[Event]) -> None:
        """Route a batch of events, in order, to the streams that listen.
        Tweets are read from tweet-store concurrently, once per event."""
        wanted = [e.data.tweet_id for e in events
                  if isinstance(e, TweetCreated) and (self._public or canonical(e.data.author) in self._audience)]
        tweets = dict(zip(wanted, await asyncio.gather(*(self._tweet(str(t)) for t in wanted)), strict=True))
        for event in events:
            if isinstance(event, TweetCreated):
                author = canonical(event.data.author)
                if event.data.tweet_id in tweets:
                    tweet = tweets[event.data.tweet_id]
                elif self._public or author in self._audience:  # a Followed earlier in this batch
                    tweet = await self._tweet(str(event.data.tweet_id))
                else:
                    continue
                if tweet is not None:
                    self._send(author, tweet_item(tweet))
            elif isinstance(event, TweetDeleted):
                self._send(canonical(event.data.author), delete_item(str(event.data.tweet_id)))
            elif isinstance(event, Followed | Unfollowed):
                self._follow_changed(event)

    async def _tweet(self, tweet_id: str) -> dict[str, Any] | None:
        try:
            return await self.tweets.get_tweet(tweet_id)
        except NotFound:
            return None  # deleted already: its TweetDeleted follows
        except DomainError as exc:
            log.warning("live update of tweet %s lost: %s", tweet_id, exc)
            return None

    def _send(self, author: str, item: Item) -> None:
        for stream in tuple(self._audience.get(author, ())):
            stream.offer(item)
        for stream in tuple(self._public):
            stream.offer(item)

    def _follow_changed(self, event: Followed | Unfollowed) -> None:
        follower = canonical(event.data.follower)
        streams = self._by_owner.get(follower)
        if not streams:
            return
        followee = sys.intern(canonical(event.data.followee))
        for stream in tuple(streams):
            if isinstance(event, Followed):
                self._listen(stream, stream.following | {followee})
            else:
                self._listen(stream, stream.following - {followee})
        if isinstance(event, Unfollowed):
            self._spawn(self._unfollow_deletes(follower, followee))

    async def _unfollow_deletes(self, follower: str, followee: str) -> None:
        try:
            page = await self.tweets.timeline("user", followee, UNFOLLOW_DELETES, None)
        except DomainError as exc:
            log.warning("deletes for %s's unfollow of %s lost: %s", follower, followee, exc)
            return
        items = [delete_item(str(t["id"])) for t in page["items"]]
        for stream in tuple(self._by_owner.get(follower, ())):
            if followee not in stream.following:  # not re-followed meanwhile
                for item in items:
                    stream.offer(item)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- resume ----------------------------------------------------------------------

    async def backlog(self, stream: Stream, last_id: str) -> list[dict[str, Any]]:
        """The items of the stream's timeline strictly newer than ``last_id``,
        oldest first (at most ``BACKLOG_MAX``: older ones are beyond a live
        client's interest and still readable with since_id paging)."""
        kind = "home" if stream.kind == "home" else "public"
        items: list[dict[str, Any]] = []
        before: str | None = None
        while len(items) < BACKLOG_MAX:
            page = await self.tweets.timeline(kind, stream.owner, BACKLOG_PAGE, before, since=last_id)
            items.extend(page["items"])
            before = page.get("next")
            if not before:
                break
        return list(reversed(items[:BACKLOG_MAX]))

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self._refresher = asyncio.create_task(self._refresh_forever())

    async def _refresh_forever(self) -> None:
        """Re-read following lists now and then: a missed Followed/Unfollowed
        (say, while the broker was away) heals within ``follow_refresh_s``."""
        while True:
            await asyncio.sleep(self.settings.follow_refresh_s)
            for owner in list(self._by_owner):
                try:
                    following = await self.social.following_all(owner)
                except DomainError as exc:
                    log.warning("could not refresh the following list of %s: %s", owner, exc)
                    continue
                for stream in tuple(self._by_owner.get(owner, ())):
                    self._listen(stream, following)

    async def close_all(self) -> None:
        """End every stream (shutdown): clients reconnect to another replica."""
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
        for task in tuple(self._tasks):
            task.cancel()
        for stream in [*self._public, *(s for group in self._by_owner.values() for s in group)]:
            stream.offer(CLOSE)
            self.close(stream)
