"""Reads of tweet-store's public timeline (split out of ``cassandra.py``,
which writes its rows in each tweet's logged batch and whose docstring
describes the tables): ``public_timeline`` is bucketed by the minute of each
tweet's timeuuid, ``public_minutes`` lists a day's non-empty minutes and
``public_days`` the non-empty days, so a page walks buckets (newest or oldest
first) and skips empty minutes and days. The schema is in
``cassandra_schema.py``."""

from __future__ import annotations

import uuid

from cassandra.cluster import Session

from fanline_shared.cassandra import Repository, execute, execute_concurrent, prepare, unix_minute
from fanline_shared.domain import timeuuid_time

MINUTES_PER_DAY = 1440
_MINUTE_WINDOW_MAX = 16  # public-timeline minute buckets read at once
_DAYS_PAGE = 32


def public_bucket(tweet_id: uuid.UUID) -> tuple[int, int]:
    """``(day, minute)`` of a tweet in the public timeline (Unix day / minute)."""
    minute = unix_minute(timeuuid_time(tweet_id))
    return minute // MINUTES_PER_DAY, minute


class CassandraPublicLine(Repository):
    """The public timeline's paged reads, newest first and (``min_id`` pages)
    oldest first."""

    def _prepare(self, session: Session) -> None:
        ks = self._ks.name
        p = prepare
        self._public_minute = p(session, f"SELECT tweet_id FROM {ks}.public_timeline WHERE minute = ? LIMIT ?")
        self._public_minute_before = p(
            session, f"SELECT tweet_id FROM {ks}.public_timeline WHERE minute = ? AND tweet_id < ? LIMIT ?"
        )
        self._minutes_of_day = p(session, f"SELECT minute FROM {ks}.public_minutes WHERE day = ? LIMIT ?")
        self._minutes_before = p(session, f"SELECT minute FROM {ks}.public_minutes WHERE day = ? AND minute < ? LIMIT ?")
        self._days_before = p(session, f"SELECT day FROM {ks}.public_days WHERE shard = 0 AND day < ? LIMIT ?")
        # Ascending (min_id pages): the same partitions read oldest first.
        self._public_minute_asc = p(
            session, f"SELECT tweet_id FROM {ks}.public_timeline WHERE minute = ? ORDER BY tweet_id ASC LIMIT ?"
        )
        self._public_minute_after = p(
            session,
            f"SELECT tweet_id FROM {ks}.public_timeline WHERE minute = ? AND tweet_id > ? ORDER BY tweet_id ASC LIMIT ?",
        )
        self._minutes_after = p(
            session, f"SELECT minute FROM {ks}.public_minutes WHERE day = ? AND minute > ? ORDER BY minute ASC LIMIT ?"
        )
        self._days_after = p(session, f"SELECT day FROM {ks}.public_days WHERE shard = 0 AND day > ? ORDER BY day ASC LIMIT ?")

    async def public(self, limit: int, before: uuid.UUID | None) -> list[uuid.UUID]:
        """Walk minute buckets newest first: the bucket of ``before`` (ids below
        it), the earlier non-empty minutes of its day, then earlier days."""
        if limit <= 0:
            return []
        ids: list[uuid.UUID] = []
        if before is not None:
            day, minute = public_bucket(before)
            rows = await execute(self._session, self._public_minute_before, (minute, before, limit), name="public_minute")
            ids.extend(r.tweet_id for r in rows)
            if len(ids) < limit:
                minutes = await execute(
                    self._session, self._minutes_before, (day, minute, MINUTES_PER_DAY), name="public_minutes"
                )
                ids.extend(await self._read_minutes([m.minute for m in minutes], limit - len(ids)))
            day_cursor = day
        else:
            # Start at the newest day that has tweets (which may be "in the
            # future" for this clock), not at today.
            day_cursor = 2**31 - 1
        while len(ids) < limit:
            days = await execute(self._session, self._days_before, (day_cursor, _DAYS_PAGE), name="public_days")
            for row in days:
                minutes = await execute(self._session, self._minutes_of_day, (row.day, MINUTES_PER_DAY), name="public_minutes")
                ids.extend(await self._read_minutes([m.minute for m in minutes], limit - len(ids)))
                if len(ids) >= limit:
                    break
            if len(days) < _DAYS_PAGE:
                break
            day_cursor = days[-1].day
        return ids[:limit]

    async def public_after(self, limit: int, after: uuid.UUID | None) -> list[uuid.UUID]:
        """Walk minute buckets oldest first: the bucket of ``after`` (ids above
        it), the later non-empty minutes of its day, then later days."""
        if limit <= 0:
            return []
        ids: list[uuid.UUID] = []
        day_cursor = -1
        if after is not None:
            day, minute = public_bucket(after)
            rows = await execute(self._session, self._public_minute_after, (minute, after, limit), name="public_minute")
            ids.extend(r.tweet_id for r in rows)
            if len(ids) < limit:
                minutes = await execute(self._session, self._minutes_after, (day, minute, MINUTES_PER_DAY), name="public_minutes")
                ids.extend(await self._read_minutes([m.minute for m in minutes], limit - len(ids), ascending=True))
            day_cursor = day
        while len(ids) < limit:
            days = await execute(self._session, self._days_after, (day_cursor, _DAYS_PAGE), name="public_days")
            for row in days:
                minutes = await execute(self._session, self._minutes_of_day, (row.day, MINUTES_PER_DAY), name="public_minutes")
                oldest_first = sorted(m.minute for m in minutes)
                ids.extend(await self._read_minutes(oldest_first, limit - len(ids), ascending=True))
                if len(ids) >= limit:
                    break
            if len(days) < _DAYS_PAGE:
                break
            day_cursor = days[-1].day
        return ids[:limit]

    async def _read_minutes(self, minutes: list[int], need: int, *, ascending: bool = False) -> list[uuid.UUID]:
        """Newest-first ids from these minute buckets (given newest first),
        reading a growing window of buckets concurrently until ``need``;
        with ``ascending``, oldest-first ids from buckets given oldest first."""
        found: list[uuid.UUID] = []
        start, window = 0, 1
        while start < len(minutes) and len(found) < need:
            chunk = minutes[start : start + window]
            results = await execute_concurrent(
                self._session,
                self._public_minute_asc if ascending else self._public_minute,
                [(m, need - len(found)) for m in chunk],
                name="public_minute",
                concurrency=len(chunk),
            )
            for rows in results:
                found.extend(r.tweet_id for r in rows)
            start += window
            window = min(window * 2, _MINUTE_WINDOW_MAX)
        return found[:need]
