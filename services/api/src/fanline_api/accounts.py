"""The gateway's cache of accounts: what rendering a status's author needs
(social-graph's profile — account id, counts of followers and followings —
and tweet-store's count of tweets), kept ``ttl_s`` and loaded once however
many requests wait for it (single flight).

A Mastodon status embeds its author's whole account, so a page of 20 statuses
by 8 authors would otherwise cost two more peer calls (profiles and counts)
on every read; a home timeline reads the same few authors again and again, so
with this cache the Mastodon home page costs what ``/v1/timeline`` costs plus
rendering (the benchmark holds it to 1.25 x). The counts shown can be up to
``ttl_s`` old; endpoints that show one account (``verify_credentials``,
``/accounts/:id``) read it fresh and refresh the cache.

Entries read after half their time are served and reloaded in the
background (refresh ahead, as tweet-store's ``SingleFlightCache``), so a
steadily read author is never waited for. Account ids never change, so the
id -> name map is kept as long as the LRU allows.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from cachetools import LRUCache

from fanline_shared.clients.social_graph import SocialGraphClient
from fanline_shared.clients.tweet_store import TweetStoreClient
from fanline_shared.domain import canonical, is_valid_username

Profile = dict[str, Any]


class AccountCache:
    def __init__(self, social: SocialGraphClient, tweets: TweetStoreClient, *, ttl_s: float = 5.0, size: int = 20_000) -> None:
        self._social = social
        self._tweets = tweets
        self._ttl = ttl_s
        self._profiles: LRUCache[str, tuple[float, Profile]] = LRUCache(maxsize=size)
        self._names: LRUCache[int, str] = LRUCache(maxsize=size)
        self._pending: dict[str, asyncio.Future[Profile | None]] = {}
        self._refreshing: set[asyncio.Task[None]] = set()

    def put(self, profile: Profile) -> None:
        """Remember a profile (with ``tweets_count``) read just now."""
        lc = canonical(str(profile["username"]))
        self._profiles[lc] = (time.monotonic(), profile)
        if profile.get("id"):
            self._names[int(profile["id"])] = lc

    async def many(self, usernames: Iterable[str], *, fresh: bool = False) -> dict[str, Profile]:
        """Profiles by canonical name; unknown users are absent."""
        now = time.monotonic()
        found: dict[str, Profile] = {}
        waiting: dict[str, asyncio.Future[Profile | None]] = {}
        load: list[str] = []
        stale: list[str] = []
        for name in dict.fromkeys(canonical(n) for n in usernames if is_valid_username(n)):
            entry = self._profiles.get(name)
            if entry is not None and not fresh and now - entry[0] < self._ttl:
                found[name] = entry[1]
                if now - entry[0] >= self._ttl / 2 and name not in self._pending:
                    stale.append(name)
            elif name in self._pending and not fresh:
                waiting[name] = self._pending[name]
            else:
                load.append(name)
        if stale:
            task = asyncio.create_task(self._load(stale))
            self._refreshing.add(task)
            task.add_done_callback(self._refreshed)
        if load:
            await self._load(load)
            for name in load:
                entry = self._profiles.get(name)
                if entry is not None:
                    found[name] = entry[1]
        for name, future in waiting.items():
            profile = await asyncio.shield(future)
            if profile is not None:
                found[name] = profile
        return found

    async def one(self, username: str, *, fresh: bool = False) -> Profile | None:
        return (await self.many([username], fresh=fresh)).get(canonical(username))

    async def by_ids(self, account_ids: Iterable[int], *, fresh: bool = False) -> dict[int, Profile]:
        """Profiles by account id; unknown ids are absent."""
        ids = list(dict.fromkeys(account_ids))
        unknown = [i for i in ids if i not in self._names]
        if unknown:
            for profile in await self._social.accounts(unknown):
                self._names[int(profile["id"])] = canonical(str(profile["username"]))
        names = {i: self._names[i] for i in ids if i in self._names}
        profiles = await self.many(names.values(), fresh=fresh)
        return {i: profiles[n] for i, n in names.items() if n in profiles}

    def _refreshed(self, task: asyncio.Task[None]) -> None:
        self._refreshing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            pass  # served until it expires; the next read past that loads in the open

    async def _load(self, names: list[str]) -> None:
        loop = asyncio.get_running_loop()
        futures = {n: loop.create_future() for n in names}
        for name, future in futures.items():
            self._pending[name] = future
        try:
            profiles, counts = await asyncio.gather(self._social.get_users(names), self._tweets.counts(names))
            got: dict[str, Profile] = {}
            for profile in profiles:
                lc = canonical(str(profile["username"]))
                got[lc] = {**profile, "tweets_count": counts.get(lc, 0)}
                self.put(got[lc])
            for name, future in futures.items():
                future.set_result(got.get(name))
        except BaseException as exc:
            for future in futures.values():
                if not future.done():
                    future.set_exception(exc)
                    future.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            for name, future in futures.items():
                if self._pending.get(name) is future:
                    del self._pending[name]
