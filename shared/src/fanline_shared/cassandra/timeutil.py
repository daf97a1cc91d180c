"""Time as Cassandra stores it: timestamps, TTLs and minute buckets.

A ``timestamp`` column keeps milliseconds and the driver returns naive UTC
(``to_utc``, ``truncate_ms``); TTLs count from the whole second of the write
and are capped at ``MAX_TTL`` (``ttl_until``); ``unix_minute`` numbers the
minute buckets that partition time-ordered tables.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

MAX_TTL = 630_720_000  # Cassandra's maximum TTL: 20 years
_MINUTE = 60


def to_utc(value: datetime) -> datetime:
    """A driver timestamp (naive UTC, millisecond precision) as an aware datetime."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def truncate_ms(value: datetime) -> datetime:
    """``value`` in UTC at the millisecond precision a ``timestamp`` column keeps,
    so what a write returns equals what a later read returns."""
    value = value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def ttl_until(expires_at: datetime, now: datetime) -> int:
    """A TTL that keeps a row at least until ``expires_at``: 0 when that is
    past, else the whole seconds left rounded up, plus one — Cassandra counts a
    TTL from the whole second of the write, so a row may otherwise expire up
    to a second early. Readers that need the exact instant compare a stored
    expiry. Capped at Cassandra's maximum TTL (20 years)."""
    seconds = (expires_at - now).total_seconds()
    if seconds <= 0:
        return 0
    return min(math.ceil(seconds) + 1, MAX_TTL)


def unix_minute(when: datetime) -> int:
    return int(when.timestamp()) // _MINUTE
