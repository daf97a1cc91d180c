"""What each event does to home timelines. No Kafka here: ``app.py`` feeds
decoded events in, and decides about retries and the dead-letter topic.

Every handler is idempotent and checks *current* state before acting, so a
redelivered, replayed or late event (e.g. one the outbox relay published after
a newer one) cannot resurrect what was undone:

* TweetCreated — if the tweet still exists: the author's own row, then every
  follower's, in pages, several pages in flight.
* TweetDeleted — remove the row from the author's and every follower's
  timeline (rows that are not there are no-ops).
* Followed — if still following: merge the author's recent tweets.
* Unfollowed — if not following again: purge the author's tweets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from fanline_shared import metrics
from fanline_shared.domain import canonical, utcnow
from fanline_shared.errors import NotFound
from fanline_shared.events import Event, Followed, TweetCreated, TweetDeleted, Unfollowed
from fanline_shared.peers import SocialGraphClient, TweetStoreClient

log = logging.getLogger(__name__)


class FanoutHandlers:
    def __init__(self, social: SocialGraphClient, tweets: TweetStoreClient, *, page_size: int,
                 pages_in_flight: int) -> None:
        self._social = social
        self._tweets = tweets
        self._page_size = page_size
        self._in_flight = pages_in_flight

    async def apply(self, event: Event) -> None:
        if isinstance(event, TweetCreated):
            await self.tweet_created(event)
        elif isinstance(event, TweetDeleted):
            await self.tweet_deleted(event)
        elif isinstance(event, Followed):
            await self.followed(event)
        elif isinstance(event, Unfollowed):
            await self.unfollowed(event)

    async def tweet_created(self, event: TweetCreated) -> None:
        data = event.data
        tweet_id = str(data.tweet_id)
        # The first page of followers is read while the tweet is checked, and
        # the author's own row goes with it: two round trips fewer per tweet,
        # during which the fan-out would write nothing.
        first = asyncio.ensure_future(self._social.edges(data.author, "followers", self._page_size, None))
        try:
            stored = await self._tweets.check_tweet(tweet_id)
            # The stored tweet is the truth: an event naming another author
            # (forged, or corrupted) would put the tweet in the wrong
            # followers' timelines. Dropped, logged and counted.
            if canonical(str(stored.get("username", ""))) != canonical(data.author):
                log.warning("dropping %s %s: event author %r, stored author %r", event.type, event.event_id,
                            data.author, stored.get("username"))
                metrics.FORGED_EVENTS.labels(event.type).inc()
                raise NotFound("event author differs from the stored tweet's")
        except BaseException as exc:
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)
            if isinstance(exc, NotFound):
                return  # deleted before we got to it, or forged: nothing to deliver
            raise

        async def write(page: list[str]) -> None:
            await self._tweets.home_add(tweet_id, data.author, page)
            metrics.TIMELINE_ROWS_WRITTEN.inc(len(page))

        await self._for_each_follower_page(data.author, write, first_page=first, with_author=True)
        _observe_delivery(data.created_at)

    async def tweet_deleted(self, event: TweetDeleted) -> None:
        data = event.data
        tweet_id = str(data.tweet_id)
        await self._tweets.home_remove(tweet_id, [data.author])

        async def remove(page: list[str]) -> None:
            await self._tweets.home_remove(tweet_id, page)
            metrics.TIMELINE_ROWS_REMOVED.inc(len(page))

        await self._for_each_follower_page(data.author, remove)

    async def followed(self, event: Followed) -> None:
        d = event.data
        if await self._social.is_following(d.follower, d.followee):
            merged = await self._tweets.home_merge(d.follower, d.followee)
            metrics.TIMELINE_ROWS_WRITTEN.inc(merged)

    async def unfollowed(self, event: Unfollowed) -> None:
        d = event.data
        if not await self._social.is_following(d.follower, d.followee):
            removed = await self._tweets.home_purge(d.follower, d.followee)
            metrics.TIMELINE_ROWS_REMOVED.inc(removed)

    async def _for_each_follower_page(self, author: str, action: Callable[[list[str]], Awaitable[None]], *,
                                      first_page: Awaitable[dict[str, Any]] | None = None,
                                      with_author: bool = False) -> None:
        """Page through *all* followers, running ``action`` on each page with
        up to ``pages_in_flight`` pages being written while the next is read.
        ``first_page``: the first page, already being fetched; ``with_author``:
        the author is added to the first page (written even with no followers).
        Any failure propagates after the in-flight pages settle."""
        in_flight: set[asyncio.Task[None]] = set()

        async def timed(page: list[str]) -> None:
            started = time.perf_counter()
            await action(page)
            metrics.FANOUT_PAGE_DURATION.observe(time.perf_counter() - started)

        after: str | None = None
        try:
            while True:
                try:
                    if first_page is not None:
                        page, first_page = await first_page, None
                    else:
                        page = await self._social.edges(author, "followers", self._page_size, after)
                except NotFound:
                    return  # the author no longer exists
                names = [item["username"] for item in page["items"]]
                if with_author:
                    names.insert(0, author)
                    with_author = False
                if names:
                    in_flight.add(asyncio.create_task(timed(names)))
                if len(in_flight) >= self._in_flight:
                    done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                    _raise_first_error(done)
                after = page.get("next")
                if not after:
                    break
            while in_flight:
                done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                _raise_first_error(done)
        finally:
            for task in in_flight:
                task.cancel()
            if in_flight:
                await asyncio.gather(*in_flight, return_exceptions=True)


def _raise_first_error(done: set[asyncio.Task[None]]) -> None:
    """Retrieve every finished page's outcome (so none is reported as "never
    retrieved"), then raise the first failure."""
    errors = [exc for task in done if (exc := task.exception()) is not None]
    if errors:
        raise errors[0]


def _observe_delivery(created_at: datetime) -> None:
    metrics.DELIVERY_LAG.observe(max(0.0, (utcnow() - created_at).total_seconds()))
