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
* SessionRevoked — nothing (it is for the gateways' session caches).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from fanline_shared import events, metrics
from fanline_shared.clients.social_graph import SocialGraphClient
from fanline_shared.clients.tweet_store import TweetStoreClient
from fanline_shared.domain import OutboxEvent, canonical, utcnow
from fanline_shared.errors import Conflict, NotFound, Overloaded
from fanline_shared.events import Event, FanoutChunk, Followed, TweetCreated, TweetDeleted, Unfollowed
from fanline_shared.logs import get_logger
from fanline_shared.policies import FANOUT_PAGE_SHED, retry

from .follower_pages import FollowerPages

# One line per step of an event (bound to its request id by app.py), never per row.
log = get_logger(__name__)

# A large account is re-registered with tweet-store at most this often per
# worker process (tweet-store keeps a registration for the home retention
# plus a day, see fanline_tweet_store.service.LARGE_REGISTRATION_MARGIN_S).
REGISTRATION_REFRESH_S = 3600.0


class FanoutHandlers:
    def __init__(
        self,
        social: SocialGraphClient,
        tweets: TweetStoreClient,
        *,
        page_size: int,
        pages_in_flight: int,
        large_account_followers: int | None = None,
        chunk_size: int | None = None,
        publish_chunk: Callable[[OutboxEvent], Awaitable[None]] | None = None,
    ) -> None:
        """``large_account_followers``: authors with at least this many
        followers are merged at read time instead of fanned out (None: every
        author is fanned out on write). ``chunk_size``: followers written per
        slice of a fan-out; the rest go to ``publish_chunk`` as
        ``FanoutChunk`` events (None: every fan-out in one go)."""
        self._social = social
        self._tweets = tweets
        self._page_size = page_size
        self._large_threshold = large_account_followers
        self._chunk = chunk_size
        self._publish_chunk = publish_chunk
        self._registered: dict[str, float] = {}  # author -> monotonic time of the last registration
        self._pages = FollowerPages(social, page_size=page_size, pages_in_flight=pages_in_flight)

    async def _follower_count(self, author: str) -> int | None:
        """The author's follower count, when something depends on it (the
        large-account threshold, or slicing); None: not asked, or no such user."""
        if self._large_threshold is None and self._chunk is None:
            return None
        try:
            profile = await self._social.get_user(author)
        except NotFound:
            return None
        return int(profile.get("followers_count", 0))

    async def _count_of(self, author: str, first: Awaitable[dict[str, Any]]) -> int | None:
        """``_follower_count``, from the first page of followers when it
        carries it (one call instead of two)."""
        if self._large_threshold is None and self._chunk is None:
            return None
        try:
            page = await first
        except NotFound:
            return None  # no such author: the paging stops at once too
        count = page.get("followers_count")
        return int(count) if count is not None else await self._follower_count(author)

    def _large(self, followers: int | None) -> bool:
        return self._large_threshold is not None and followers is not None and followers >= self._large_threshold

    async def _is_large(self, author: str) -> bool:
        if self._large_threshold is None:
            return False
        return self._large(await self._follower_count(author))

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
        elif isinstance(event, FanoutChunk):
            await self.fanout_chunk(event)
        # SessionRevoked: for the gateways' session caches; no timeline changes.

    async def tweet_created(self, event: TweetCreated) -> None:
        data = event.data
        tweet_id = str(data.tweet_id)
        # The first page of followers carries the author's follower count
        # when something depends on it. Only active followers: the others
        # are skipped by the index itself and get their timeline regenerated
        # when they come back. The tweet is not fetched on its own: the first
        # write (the author's row, with the first page) asks tweet-store to
        # check that it is stored and is the author's, and writes nothing
        # otherwise — one call per tweet fewer than a separate check, and no
        # row is written before it (issue 31).
        counted = self._large_threshold is not None or self._chunk is not None
        first = asyncio.ensure_future(self._social.edges(data.author, "followers-active", self._page_size, None, counts=counted))
        try:
            followers = await self._count_of(data.author, first)
            large = self._large(followers)
            sliced = (
                self._chunk is not None and self._publish_chunk is not None and followers is not None and followers > self._chunk
            )
            if large or sliced:
                first.cancel()
                await asyncio.gather(first, return_exceptions=True)
                # Checked, and the author's own row written, before anything else.
                await self._writer(tweet_id, data.author, check_first=True)([data.author])
            if large:
                # Registered before the event is acknowledged: home reads merge
                # this author from now on, so the tweet cannot go missing.
                await self._register_large(data.author)
                metrics.FANOUT_SKIPPED_LARGE.inc()
                _observe_delivery(data.created_at)
                log.info(
                    "fanout.skipped",
                    tweet_id=tweet_id,
                    author=data.author,
                    reason="large_account",
                    followers=followers,
                    threshold=self._large_threshold,
                )
                return
            if sliced:
                # More followers than one slice: the author's row here, every
                # follower in slices on the chunks topic, written at bulk
                # priority. This partition (other authors' events) never waits
                # for any part of a large fan-out.
                await self._hand_on(data.tweet_id, data.author, data.created_at, "")
                log.info("fanout.sliced", tweet_id=tweet_id, author=data.author, followers=followers, chunk=self._chunk)
                return

            # Within one slice (as far as the count said): written here; should
            # the followers have grown past it meanwhile, the rest is sliced.
            rows = [0]
            rest = await self._pages.for_each(
                data.author,
                self._writer(tweet_id, data.author, rows, check_first=True),
                first_page=first,
                with_author=True,
                direction="followers-active",
                max_followers=self._chunk,
                first_alone=True,
            )
        except (NotFound, Conflict) as exc:
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)
            if isinstance(exc, Conflict):
                # The stored tweet is the truth: an event naming another author
                # (forged, or corrupted) would put the tweet in the wrong
                # followers' timelines. Dropped, logged and counted.
                log.warning("dropping %s %s: %s", event.type, event.event_id, exc.message)
                metrics.FORGED_EVENTS.labels(event.type).inc()
            # Deleted before we got to it, or forged: nothing to deliver.
            log.info("fanout.skipped", tweet_id=tweet_id, author=data.author, reason="tweet_gone")
            return
        except BaseException:
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)
            raise
        # Inactive followers are not in the active index: followers minus
        # rows written (the author's own row aside) were skipped for that.
        inactive = max(0, followers - (rows[0] - 1)) if followers is not None and rest is None else None
        log.info(
            "fanout.written",
            tweet_id=tweet_id,
            author=data.author,
            rows=rows[0],
            followers=followers,
            inactive_skipped=inactive,
            continues_after=rest,
        )
        if rest is not None:
            await self._hand_on(data.tweet_id, data.author, data.created_at, rest)
            return
        _observe_delivery(data.created_at)

    async def fanout_chunk(self, event: FanoutChunk) -> None:
        """One slice of a large fan-out: the active followers after
        ``after``, at most ``chunk`` of them.

        The next slice is handed on *before* this one is written, so slices
        are written side by side by whichever workers own their partitions.
        A slice runs apart from the author's partition, so an unfollow (or a
        follower going inactive) can be applied between reading a follower's
        name and writing their row: afterwards the slice reads its names
        again, and removes the row of anyone who is no longer there (an
        unfollow that lands later is purged after this write, by its own
        event)."""
        d = event.data
        tweet_id = str(d.tweet_id)
        try:
            stored = await self._tweets.check_tweet(tweet_id)
        except NotFound:
            log.info("fanout.skipped", tweet_id=tweet_id, author=d.author, reason="tweet_gone", after=d.after)
            return  # deleted meanwhile: nothing more to deliver
        if canonical(str(stored.get("username", ""))) != canonical(d.author):
            log.warning(
                "dropping %s %s: author %r, stored author %r", event.type, event.event_id, d.author, stored.get("username")
            )
            metrics.FORGED_EVENTS.labels(event.type).inc()
            return
        names, rest = await self._pages.names(d.author, d.after, self._chunk or self._page_size)
        if rest is not None:
            await self._hand_on(d.tweet_id, d.author, d.created_at, rest)
        write = self._writer(tweet_id, d.author, bulk=True)
        await self._pages.run([names[i : i + self._page_size] for i in range(0, len(names), self._page_size)], write)
        if names:
            still, _ = await self._pages.names(d.author, d.after, len(names), until=names[-1])
            gone = sorted(set(names) - set(still))
            if gone:
                await self._tweets.home_remove(tweet_id, gone)
                metrics.TIMELINE_ROWS_REMOVED.inc(len(gone))
        log.info(
            "fanout.slice_written",
            tweet_id=tweet_id,
            author=d.author,
            after=d.after,
            rows=len(names),
            unfollowed_meanwhile=len(gone) if names else 0,
            continues_after=rest,
        )
        if rest is None:
            _observe_delivery(d.created_at)

    def _writer(
        self, tweet_id: str, author: str, rows: list[int] | None = None, *, bulk: bool = False, check_first: bool = False
    ) -> Callable[[list[str]], Awaitable[None]]:
        """Writes a page of home rows (``bulk``: a large fan-out's slice, at
        the lowest priority); ``rows[0]`` counts them (for the log).
        ``check_first``: the first page asks tweet-store to check the tweet
        (``TweetStoreClient.home_add``); the caller awaits it alone."""
        unchecked = [check_first]

        async def once(page: list[str]) -> None:
            if bulk:
                await self._tweets.home_add(tweet_id, author, page, bulk=True)
            elif unchecked[0]:
                await self._tweets.home_add(tweet_id, author, page, check=True)
                unchecked[0] = False
            else:
                await self._tweets.home_add(tweet_id, author, page)

        async def write(page: list[str]) -> None:
            # A refused page is sent again on its own (FANOUT_PAGE_SHED).
            await retry(FANOUT_PAGE_SHED, lambda: once(page), retry_on=(Overloaded,))
            metrics.TIMELINE_ROWS_WRITTEN.inc(len(page))
            if rows is not None:
                rows[0] += len(page)

        return write

    async def _hand_on(self, tweet_id: uuid.UUID, author: str, created_at: datetime, after: str) -> None:
        if self._publish_chunk is None:
            raise RuntimeError("a chunked fan-out needs a chunks topic")
        # The slice carries this event's request id (bound here) in its header.
        await self._publish_chunk(events.fanout_chunk(tweet_id, author, created_at, after))
        metrics.FANOUT_CHUNKS.inc()
        log.info("fanout.slice_published", tweet_id=str(tweet_id), author=author, after=after)

    async def tweet_deleted(self, event: TweetDeleted) -> None:
        data = event.data
        tweet_id = str(data.tweet_id)
        await self._tweets.home_remove(tweet_id, [data.author])
        if await self._is_large(data.author):
            log.info("fanout.removed", tweet_id=tweet_id, author=data.author, rows=1, reason="large_account")
            return
        rows = [1]

        async def remove(page: list[str]) -> None:
            await self._tweets.home_remove(tweet_id, page)
            metrics.TIMELINE_ROWS_REMOVED.inc(len(page))
            rows[0] += len(page)

        await self._pages.for_each(data.author, remove)
        log.info("fanout.removed", tweet_id=tweet_id, author=data.author, rows=rows[0])

    async def followed(self, event: Followed) -> None:
        d = event.data
        merged = 0
        following = await self._social.reconcile_follow(d.follower, d.followee)  # also repairs a crashed follow
        if following:
            merged = await self._tweets.home_merge(d.follower, d.followee)
            metrics.TIMELINE_ROWS_WRITTEN.inc(merged)
        log.info("follow.applied", follower=d.follower, followee=d.followee, following=following, merged=merged)

    async def unfollowed(self, event: Unfollowed) -> None:
        d = event.data
        removed = 0
        following = await self._social.reconcile_follow(d.follower, d.followee)
        if not following:
            removed = await self._tweets.home_purge(d.follower, d.followee)
            metrics.TIMELINE_ROWS_REMOVED.inc(removed)
        log.info("unfollow.applied", follower=d.follower, followee=d.followee, following=following, removed=removed)


def _observe_delivery(created_at: datetime) -> None:
    metrics.DELIVERY_LAG.observe(max(0.0, (utcnow() - created_at).total_seconds()))
