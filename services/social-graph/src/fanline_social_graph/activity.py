"""Coarse last-active tracking, and the active-followers index the fan-out pages.

api.md: a user with no authenticated request for ``FANLINE_INACTIVE_AFTER_S``
is skipped by fan-out, and their next home read regenerates their timeline.

* **Coarse**: every authenticated request (and every login) calls ``seen``,
  which does no I/O unless this process has not seen the user for
  ``refresh_s`` (a quarter of the inactivity period, at most 6 h): then it
  reads the user's ``user_activity`` row and, if no replica refreshed it
  within ``refresh_s`` either, refreshes it — one write per user per
  ``refresh_s``, not one per request.
* **The index**: a refresh rewrites the user under every followee's
  ``followers_active`` with a TTL of ``inactive_after_s + refresh_s``. An
  active user is refreshed long before their rows expire; a user who stops
  coming drops out of every index by expiry, with no sweeper, and the
  fan-out — which pages this index — skips them with no check per row.
  Follows and unfollows keep it in step (``activate`` / ``deactivate``).
* **Returning**: when the recorded ``last_seen`` is ``inactive_after_s`` old
  or older (or was never recorded), the user's rows may have expired and
  their stored home timeline missed tweets. ``seen`` then re-activates them
  in every index *before* it answers — so every later tweet is fanned out to
  them — and records ``returned_at``; social-graph reports it with the
  session (for a day), and the gateway has tweet-store regenerate the home
  timeline from the userlines (``fanline_tweet_store.regeneration``),
  answering ``206`` meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from fanline_shared.domain import canonical, utcnow

from .ports import ActivityRepository

log = logging.getLogger(__name__)

# How long after a return the session keeps reporting ``returned_at`` (the
# gateway asks tweet-store whether the regeneration is done while it does).
RETURN_REPORTED_S = 24 * 3600
MAX_REFRESH_S = 6 * 3600
_FOLLOWING_PAGE = 1000

FollowingPages = Callable[[str, int, str | None], Awaitable[list[str]]]


class ActivityTracker:
    def __init__(self, repo: ActivityRepository, following: FollowingPages, inactive_after_s: float) -> None:
        """``following(username, limit, after)``: canonical followees, paged by name."""
        self._repo = repo
        self._following = following
        self.inactive_after = timedelta(seconds=inactive_after_s)
        self.refresh_s = min(inactive_after_s / 4, MAX_REFRESH_S)
        self.ttl_s = math.ceil(inactive_after_s + self.refresh_s)
        # username -> (monotonic time it was known fresh, returned_at)
        self._fresh: dict[str, tuple[float, datetime | None]] = {}
        self._refreshing: dict[str, asyncio.Task[None]] = {}

    async def seen(self, username: str) -> datetime | None:
        """Note an authenticated request by ``username``; the time they came
        back from inactivity if that was within the last day, else None."""
        name = canonical(username)
        cached = self._fresh.get(name)
        if cached is not None and time.monotonic() - cached[0] < self.refresh_s:
            return _reported(cached[1])
        now = utcnow()
        last_seen, returned_at = await self._repo.get(name)
        if last_seen is not None and (now - last_seen).total_seconds() < self.refresh_s:
            self._remember(name, returned_at)
            return _reported(returned_at)
        if last_seen is None or now - last_seen >= self.inactive_after:
            # Back (or never recorded): in every index again before anyone
            # relies on it, then a return is on record.
            await self._refresh_index(name)
            returned_at = now
        else:
            self._refresh_in_background(name)
        await self._repo.record(name, now, returned_at)
        self._remember(name, returned_at)
        return _reported(returned_at)

    async def created(self, username: str) -> None:
        """A new user is active from the start and has nothing to regenerate."""
        await self._repo.record(username, utcnow(), None)
        self._remember(canonical(username), None)

    async def followed(self, follower: str, followee: str) -> None:
        await self._repo.activate(follower, [followee], self.ttl_s)

    async def unfollowed(self, follower: str, followee: str) -> None:
        await self._repo.deactivate(follower, followee)

    def _remember(self, name: str, returned_at: datetime | None) -> None:
        if len(self._fresh) > 100_000:
            self._fresh.clear()
        self._fresh[name] = (time.monotonic(), returned_at)

    async def _refresh_index(self, name: str) -> None:
        after: str | None = None
        while True:
            followees = await self._following(name, _FOLLOWING_PAGE, after)
            if followees:
                await self._repo.activate(name, followees, self.ttl_s)
            if len(followees) < _FOLLOWING_PAGE:
                return
            after = followees[-1]

    def _refresh_in_background(self, name: str) -> None:
        """A routine refresh (the rows still have ``refresh_s`` x 4 to live):
        off the request's clock, one at a time per user."""
        if name in self._refreshing:
            return

        async def run() -> None:
            try:
                await self._refresh_index(name)
            except Exception as exc:  # noqa: BLE001 - retried at the next refresh
                log.warning("activity refresh of %s failed (retried later): %s", name, exc)
            finally:
                self._refreshing.pop(name, None)

        self._refreshing[name] = asyncio.create_task(run())

    async def close(self) -> None:
        tasks = list(self._refreshing.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _reported(returned_at: datetime | None) -> datetime | None:
    if returned_at is None or (utcnow() - returned_at).total_seconds() > RETURN_REPORTED_S:
        return None
    return returned_at
