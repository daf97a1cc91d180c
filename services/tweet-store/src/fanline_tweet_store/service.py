"""The tweet-store service layer: posting, deleting, timelines.

A timeline page is always one slice (ids) plus one multi-get of tweets —
never one query per item.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from itertools import takewhile
from typing import Any

from fanline_shared import events
from fanline_shared.domain import (
    OutboxEvent,
    Tweet,
    canonical,
    new_timeuuid,
    timeuuid_rfc3339,
    timeuuid_sort_key,
    timeuuid_time,
    utcnow,
    validate_body,
    validate_username,
)
from fanline_shared.errors import Conflict, Forbidden, NotFound

from .adapters import TweetStoreStorage
from .home_cap import HomeCap
from .hybrid import HybridHome
from .regeneration import Regenerator
from .sids import SidGenerator, to_sid

# Unfollow removes the author's tweets from the follower's timeline: it checks
# the author's newest tweets, up to this many; past them it reads the
# follower's (capped) home timeline for the author's rows instead.
PURGE_PAGE = 500


def _deleted(tweet_id: uuid.UUID) -> NotFound:
    return NotFound(f"tweet {tweet_id} was deleted", code="tweet_not_found")


def tweet_json(tweet: Tweet) -> dict[str, Any]:
    """A tweet as the internal API returns it: the public fields, plus its
    ``sid`` (the Mastodon-compatible status id, ``sids.py``; the gateway's
    ``/v1`` leaves it out)."""
    return {
        "id": str(tweet.id),
        "username": tweet.username,
        "body": tweet.body,
        "created_at": timeuuid_rfc3339(tweet.id),
        "sid": str(to_sid(tweet.id)),
    }


# A large account stays registered this long past the retention of its
# last skipped tweet: the worker re-registers an author at most once per
# this interval (fanline_fanout.handlers), so the registration must outlive it.
LARGE_REGISTRATION_MARGIN_S = 24 * 3600


class TweetStore:
    def __init__(
        self,
        storage: TweetStoreStorage,
        *,
        retention_s: int,
        idempotency_ttl_s: int,
        merge_count: int,
        hybrid: HybridHome,
        cap: HomeCap,
        regenerator: Regenerator,
        ids: SidGenerator | None = None,
    ) -> None:
        self._s = storage
        # Mints the ids of new tweets (sids.py); without one (tools, some
        # tests) new ids are random timeuuids, which have no sid of their own.
        self._ids = ids
        self._retention_s = retention_s
        self._retention = timedelta(seconds=retention_s)
        self._idem_ttl = idempotency_ttl_s
        self._merge_count = merge_count
        self._hybrid = hybrid
        self._cap = cap
        self.regenerator = regenerator

    async def post(self, username: str, body: object, idempotency_key: str | None) -> tuple[Tweet, bool, OutboxEvent]:
        """Store a tweet; with a key, a repeat returns the first tweet.

        Returns the tweet, whether this call created it, and its event."""
        author = validate_username(username)
        text = validate_body(body)
        tweet = Tweet(id=self._ids.next_timeuuid() if self._ids is not None else new_timeuuid(), username=author, body=text)
        if idempotency_key is not None:
            bound = await self._s.tweets.reserve_idempotency_key(author, idempotency_key, tweet, self._idem_ttl)
            if bound.id != tweet.id:
                return await self._repeat(bound)
        event = events.tweet_created(tweet.id, tweet.username, tweet.created_at)
        # Without a key the id above is this call's alone (the gateway never
        # retries an unkeyed create), so the store may skip its existence
        # check. With a key, a concurrent repeat may write the same id, so the
        # check (an LWT in Cassandra) decides who counts the tweet.
        created = await self._s.tweets.create(tweet, event, fresh=idempotency_key is None)
        return tweet, created, event

    async def _repeat(self, bound: Tweet) -> tuple[Tweet, bool, OutboxEvent]:
        """A keyed repeat: (re)write the bound tweet so that an earlier
        request that crashed after reserving still completes — unless the
        tweet was deleted since, which answers ``404 tweet_not_found`` and
        creates nothing (api.md).

        A delete racing this repeat is caught by the second look: ``delete``
        stores its marker before removing the tweet, so if this rewrite landed
        after the removal, the marker is visible now and the tweet is
        removed again (its count and events stay balanced: the rewrite
        counted it once, this delete uncounts it once)."""
        tweets = self._s.tweets
        if await tweets.was_deleted(bound.id):
            raise _deleted(bound.id)
        event = events.tweet_created(bound.id, bound.username, bound.created_at)
        await tweets.create(bound, event)
        if await tweets.was_deleted(bound.id):
            await tweets.delete(
                bound, events.tweet_deleted(bound.id, bound.username, sid=str(to_sid(bound.id))), remember_s=self._idem_ttl
            )
            raise _deleted(bound.id)
        return bound, False, event

    async def get(self, tweet_id: uuid.UUID) -> Tweet:
        tweet = await self._s.tweets.get(tweet_id)
        if tweet is None:
            raise NotFound(f"no tweet {tweet_id}", code="tweet_not_found")
        return tweet

    async def delete(self, tweet_id: uuid.UUID, actor: str) -> OutboxEvent:
        tweet = await self.get(tweet_id)
        if canonical(tweet.username) != canonical(actor):
            raise Forbidden("you can only delete your own tweets", code="forbidden")
        event = events.tweet_deleted(tweet.id, tweet.username, sid=str(to_sid(tweet.id)))
        # Remembered for the idempotency window: a keyed repeat of the post
        # that created it must answer 404, not restore it.
        await self._s.tweets.delete(tweet, event, remember_s=self._idem_ttl)
        return event

    async def page(
        self,
        kind: str,
        owner: str | None,
        limit: int,
        before: uuid.UUID | None,
        since: uuid.UUID | None = None,
        after: uuid.UUID | None = None,
    ) -> tuple[list[Tweet], str | None]:
        """One timeline page: a slice of ids, then one multi-get.

        Only ids strictly older than ``before`` and, with ``since``, strictly
        newer than ``since`` (api.md "Newer than"): every source is newest
        first, so cutting its first ``limit + 1`` ids at ``since`` is exact,
        and once an id at or below ``since`` shows there is no next page.
        Deleted tweets can linger as ids (in home timelines until the worker
        removes them); the multi-get drops them, so they never show. The next
        cursor is the last id of the slice, so paging stays exact.

        With ``after`` (``min_id``), the page is the ``limit`` *oldest* items
        strictly newer than ``after`` (and older than ``before``), read
        oldest first from every source and returned newest first; ``since``
        is then ignored, as Mastodon does, and there is no next cursor."""
        if after is not None:
            return await self._page_after(kind, owner, limit, before, after), None
        if kind == "home":
            assert owner is not None
            ids = await self._hybrid.ids(owner, limit + 1, before)
        elif kind == "user":
            assert owner is not None
            ids = await self._s.tweets.userline(owner, limit + 1, before)
        else:
            ids = await self._s.tweets.public(limit + 1, before)
        if since is not None:
            floor = timeuuid_sort_key(since)
            ids = list(takewhile(lambda i: timeuuid_sort_key(i) > floor, ids))
        more = len(ids) > limit
        ids = ids[:limit]
        found = await self._s.tweets.get_many(ids)
        items = [found[i] for i in ids if i in found]
        return items, (str(ids[-1]) if more and ids else None)

    async def _page_after(
        self, kind: str, owner: str | None, limit: int, before: uuid.UUID | None, after: uuid.UUID
    ) -> list[Tweet]:
        if kind == "home":
            assert owner is not None
            ids = await self._hybrid.ids_after(owner, limit, after)
        elif kind == "user":
            assert owner is not None
            ids = await self._s.tweets.userline_after(owner, limit, after)
        else:
            ids = await self._s.tweets.public_after(limit, after)
        if before is not None:
            ceiling = timeuuid_sort_key(before)
            ids = list(takewhile(lambda i: timeuuid_sort_key(i) < ceiling, ids))
        found = await self._s.tweets.get_many(ids)
        return [found[i] for i in reversed(ids) if i in found]

    async def counts(self, usernames: Sequence[str]) -> dict[str, int]:
        return await self._s.tweets.counts(usernames)

    # --- home timelines (driven by the fan-out worker) -------------------------

    async def home_add(self, tweet_id: uuid.UUID, author: str, owners: Sequence[str], *, check: bool = False) -> None:
        """Write ``tweet_id`` into each owner's home timeline. With ``check``,
        first make sure the tweet is stored and is ``author``'s (the fan-out
        worker's first page of a tweet: the check costs it no call of its
        own): ``NotFound`` if it is gone, ``Conflict`` (``author_mismatch``)
        if its event named another author; nothing is written then."""
        if check:
            tweet = await self.get(tweet_id)
            if canonical(tweet.username) != canonical(author):
                raise Conflict(
                    f"event author {author[:32]!r} differs from the stored author {tweet.username!r} of tweet {tweet_id}",
                    code="author_mismatch",
                )
        await self._s.home.add(owners, tweet_id, author)
        self._cap.wrote(owners, tweet_id)

    async def regeneration_done(self, owner: str, returned_at: datetime) -> bool:
        """Whether ``owner``'s home timeline was regenerated since they came
        back at ``returned_at``; starts the regeneration if nobody runs it."""
        return await self.regenerator.status(validate_username(owner), returned_at)

    async def register_large_account(self, author: str) -> None:
        """``author``'s tweets skip the fan-out: merge them at read time for
        as long as any of them can be in a home timeline."""
        await self._s.large.register(validate_username(author), self._retention_s + LARGE_REGISTRATION_MARGIN_S)

    async def home_remove(self, tweet_id: uuid.UUID, owners: Sequence[str]) -> None:
        await self._s.home.remove(owners, tweet_id)

    async def home_merge(self, owner: str, author: str) -> int:
        """Merge the author's recent tweets into ``owner``'s home timeline."""
        ids = await self._s.tweets.userline(author, self._merge_count, None)
        horizon = utcnow() - self._retention
        recent = [(i, author) for i in ids if timeuuid_time(i) > horizon]
        if recent:  # nothing added, nothing to trim: no batch, no trim scan
            await self._s.home.add_many(owner, recent)
            self._cap.schedule([owner])
        return len(recent)

    async def home_purge(self, owner: str, author: str) -> int:
        """Remove the author's tweets (back to the retention horizon) from
        ``owner``'s home timeline.

        Only the rows that are there are deleted: a delete of an absent row
        is a tombstone every later read of this home timeline must skip. An
        author whose tweets in retention fit one userline page has those
        checked; a more prolific one has the owner's home timeline read for
        their rows instead, a partition the row cap bounds, where paging the
        userline would read every one of their tweets back to the horizon."""
        horizon = utcnow() - self._retention
        ids = await self._s.tweets.userline(author, PURGE_PAGE, None)
        live = [i for i in ids if timeuuid_time(i) > horizon]
        if len(ids) < PURGE_PAGE or len(live) < len(ids):
            present = await self._s.home.present(owner, live) if live else []
        else:
            present = await self._s.home.by_author(owner, author)
        if present:
            await self._s.home.remove_many(owner, present)
        return len(present)
