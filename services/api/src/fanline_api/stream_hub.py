"""Live timelines: the open streams of this gateway process and the routing of
events to them (api.md "Live updates — server-sent events").

Every gateway replica sees *every* event (``stream_events.py`` reads the whole events
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

Idle streams are cheap (docs/benchmarks.md, "Live streams"): one timer task
per process sends every stream its heartbeat (instead of sse-starlette's
ping task and timer per stream), staggered over ``HEARTBEAT_SLOTS`` ticks so
1,000 streams do not all write in the same instant, and a stream's queue is a
plain list with one waiter (an ``asyncio.Queue`` costs three deques, ~2.5 KiB).
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
from fanline_shared.clients.social_graph import SocialGraphClient
from fanline_shared.clients.tweet_store import TweetStoreClient
from fanline_shared.domain import canonical
from fanline_shared.errors import DomainError, NotFound, RateLimited
from fanline_shared.events import Event, Followed, TweetCreated, TweetDeleted, Unfollowed

from .config import LiveSettings
from .v1 import v1_tweet

log = logging.getLogger(__name__)

UNFOLLOW_DELETES = 100
QUEUE_MAX = 256
# Streams are spread over this many heartbeat ticks per heartbeat period.
HEARTBEAT_SLOTS = 15
# Resume backlog: pages read from tweet-store and the most items replayed.
BACKLOG_PAGE = 100
BACKLOG_MAX = 1000


@dataclass(frozen=True, slots=True)
class Item:
    """One event for a client: ``event`` is "update" or "delete".

    ``data`` is the ``/v1`` payload; ``tweet`` (updates) and ``sid``
    (deletes, when the event carries it) let the Mastodon-compatible streams
    render theirs, once per event however many streams get it (``memo``,
    keyed by the rendering's base URL)."""

    event: str
    data: str
    id: str | None = None
    created_at: float | None = None  # the tweet's creation time, for the latency histogram
    tweet: dict[str, Any] | None = None
    sid: str | None = None
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


# Ends a stream (shutdown or overflow); the client reconnects with Last-Event-ID.
CLOSE = Item("close", "")
# Time for the stream's heartbeat (a comment line).
HEARTBEAT = Item("heartbeat", "")


@dataclass(eq=False, slots=True)
class Stream:
    """One open stream: what it listens to, and its bounded queue of items
    (one reader, the stream's relay)."""

    kind: str  # "home" or "public"
    owner: str | None  # canonical username of a home stream
    slot: int = 0  # which heartbeat tick pings it (Hub)
    following: frozenset[str] = frozenset()
    closed: bool = False
    _items: list[Item] = field(default_factory=list)  # oldest first, at most QUEUE_MAX
    _waiter: asyncio.Future[None] | None = None  # the relay waiting in next()

    def offer(self, item: Item) -> None:
        if self.closed:
            return
        if len(self._items) >= QUEUE_MAX:
            # Too slow: drop what is queued and end the stream; it resumes
            # from Last-Event-ID on reconnect and misses nothing.
            log.info("stream of %s overflowed; disconnecting it", self.owner or "public")
            self._items.clear()
            item = CLOSE
            self.closed = True
        self._items.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def next(self) -> Item:
        """The oldest queued item, waiting for one if there is none."""
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.pop(0)  # at most QUEUE_MAX items: a list is cheaper than a deque here

    def take_nowait(self) -> Item | None:
        """The oldest queued item, or None (tests, and draining)."""
        return self._items.pop(0) if self._items else None


def tweet_item(tweet: dict[str, Any]) -> Item:
    created = datetime.fromisoformat(str(tweet["created_at"]).replace("Z", "+00:00")).timestamp()
    return Item("update", orjson.dumps(v1_tweet(tweet)).decode(), str(tweet["id"]), created, tweet=tweet)


def delete_item(tweet_id: str, sid: str | None = None) -> Item:
    return Item("delete", orjson.dumps({"id": tweet_id}).decode(), sid=sid)


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
        self._heartbeat: asyncio.Task[None] | None = None
        self._opened = 0  # streams ever opened: spreads them over the heartbeat slots

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
            raise RateLimited(
                f"at most {self.settings.max_streams_per_user} streams per user", code="too_many_streams", retry_after=5
            )
        stream = Stream("home", owner, self._next_slot())
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
        stream = Stream("public", None, self._next_slot())
        self._public.add(stream)
        metrics.STREAMS_OPEN.labels("public").inc()
        return stream

    def _next_slot(self) -> int:
        self._opened += 1
        return self._opened % HEARTBEAT_SLOTS

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
        wanted = [
            e.data.tweet_id
            for e in events
            if isinstance(e, TweetCreated) and (self._public or canonical(e.data.author) in self._audience)
        ]
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
                self._send(canonical(event.data.author), delete_item(str(event.data.tweet_id), event.data.sid))
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
        items = [delete_item(str(t["id"]), t.get("sid")) for t in page["items"]]
        for stream in tuple(self._by_owner.get(follower, ())):
            if followee not in stream.following:  # not re-followed meanwhile
                for item in items:
                    stream.offer(item)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- resume ----------------------------------------------------------------------

    async def backlog(self, stream: Stream, last_id: str, *, sid: bool = False) -> list[dict[str, Any]]:
        """The items of the stream's timeline strictly newer than ``last_id``,
        oldest first (at most ``BACKLOG_MAX``: older ones are beyond a live
        client's interest and still readable with since_id paging).
        ``sid``: ``last_id`` is a status id (the Mastodon-compatible streams)."""
        kind = "home" if stream.kind == "home" else "public"
        items: list[dict[str, Any]] = []
        before: str | None = None
        since, sids = (None, {"since_sid": int(last_id)}) if sid else (last_id, None)
        while len(items) < BACKLOG_MAX:
            page = await self.tweets.timeline(kind, stream.owner, BACKLOG_PAGE, before, since=since, sids=sids)
            items.extend(page["items"])
            before = page.get("next")
            if not before:
                break
        return list(reversed(items[:BACKLOG_MAX]))

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self._refresher = asyncio.create_task(self._refresh_forever())
        self._heartbeat = asyncio.create_task(self._heartbeat_forever())

    def _streams(self) -> list[Stream]:
        return [*self._public, *(s for group in self._by_owner.values() for s in group)]

    async def _heartbeat_forever(self) -> None:
        """Every ``heartbeat_s / HEARTBEAT_SLOTS``, queue a heartbeat for the
        streams of the next slot: each stream gets one every ``heartbeat_s``
        (ticks on a fixed grid, so the period does not drift past it), and a
        process with 1,000 streams writes ~67 heartbeats a second rather than
        1,000 at once. One task and one timer, whatever the number of streams."""
        loop = asyncio.get_running_loop()
        tick = self.settings.heartbeat_s / HEARTBEAT_SLOTS
        start, n = loop.time(), 0
        while True:
            n += 1
            await asyncio.sleep(max(0.0, start + n * tick - loop.time()))
            slot = n % HEARTBEAT_SLOTS
            for stream in self._streams():
                if stream.slot == slot:
                    stream.offer(HEARTBEAT)

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
        for task in (self._refresher, self._heartbeat):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for task in tuple(self._tasks):
            task.cancel()
        for stream in self._streams():
            stream.offer(CLOSE)
            self.close(stream)
