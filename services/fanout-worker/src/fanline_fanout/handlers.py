"""What each event does to home timelines. No Kafka here: ``app.py`` feeds
decoded events in, and decides about retries and the dead-letter topic.

Every handler is idempotent and checks *current* state before acting, so a
redelivered, replayed or late event (e.g. one the outbox relay published after
a newer one) cannot resurrect what was undone:

* TweetCreated — if the tweet still exists: the author's own row, then every
  follower's, in pages, several pages in flight. An author with at least
  ``large_account_followers`` followers (a *large account*) is registered
  with tweet-store instead and only their own row is written: their tweets
  are merged into followers' home timelines at read time
  (``fanline_tweet_store.hybrid``).
* TweetDeleted — remove the row from the author's and every follower's
  timeline (rows that are not there are no-ops); for a large account only
  the author's own row (home reads drop deleted tweets anyway, and deleting
  rows that were never written would only leave tombstones).
* Followed — if still following: merge the author's recent tweets.
* Unfollowed — if not following again: purge the author's tweets.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from fanline_shared import metrics
from fanline_shared.domain import utcnow
from fanline_shared.errors import NotFound
from fanline_shared.events import Event, Followed, TweetCreated, TweetDeleted, Unfollowed
from fanline_shared.peers import SocialGraphClient, TweetStoreClient

# A large account is re-registered with tweet-store at most this often per
# worker process (tweet-store keeps a registration for the home retention
# plus a day, see fanline_tweet_store.service.LARGE_REGISTRATION_MARGIN_S).
REGISTRATION_REFRESH_S = 3600.0


class FanoutHandlers:
    def __init__(self, social: SocialGraphClient, tweets: TweetStoreClient, *, page_size: int,
                 pages_in_flight: int, large_account_followers: int | None = None) -> None:
        """``large_account_followers``: authors with at least this many
        followers are merged at read time instead of fanned out (None: every
        author is fanned out on write)."""
        self._social = social
        self._tweets = tweets
        self._page_size = page_size
        self._in_flight = pages_in_flight
        self._large_threshold = large_account_followers
        self._registered: dict[str, float] = {}  # author -> monotonic time of the last registration

    async def _is_large(self, author: str) -> bool:
        if self._large_threshold is None:
            return False
        try:
            profile = await self._social.get_user(author)
        except NotFound:
            return False
        return int(profile.get("followers_count", 0)) >= self._large_threshold

    async def _register_large(self, author: str) -> None:
        now = time.monotonic()
        last = self._registered.get(author)
        if last is None or now - last > REGISTRATION_REFRESH_S:
            await self._tweets.register_large_account(author)
            if len(self._registered) > 100_000:
                self._registered.clear()
            self._registered[author] = now

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
        # Only active followers: the others are skipped by the index itself
        # and get their timeline regenerated when they come back.
        first = asyncio.ensure_future(self._social.edges(data.author, "followers-active", self._page_size, None))
        try:
            _, large = await asyncio.gather(self._tweets.check_tweet(tweet_id), self._is_large(data.author))
        except BaseException as exc:
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)
            if isinstance(exc, NotFound):
                return  # deleted before we got to it: nothing to deliver
            raise
        if large:
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)
            # Registered before anything is acknowledged: home reads merge
            # this author from now on, so the tweet cannot go missing.
            await self._register_large(data.author)
            await self._tweets.home_add(tweet_id, data.author, [data.author])
            metrics.TIMELINE_ROWS_WRITTEN.inc()
            metrics.FANOUT_SKIPPED_LARGE.inc()
            _observe_delivery(data.created_at)
            return

        async def write(page: list[str]) -> None:
            await self._tweets.home_add(tweet_id, data.author, page)
            metrics.TIMELINE_ROWS_WRITTEN.inc(len(page))

        await self._for_each_follower_page(data.author, write, first_page=first, with_author=True,
                                           direction="followers-active")
        _observe_delivery(data.created_at)

    async def tweet_deleted(self, event: TweetDeleted) -> None:
        data = event.data
        tweet_id = str(data.tweet_id)
        await self._tweets.home_remove(tweet_id, [data.author])
        if await self._is_large(data.author):
            return

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
                                      with_author: bool = False, direction: str = "followers") -> None:
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
                        page = await self._social.edges(author, direction, self._page_size, after)
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
