"""Status ids: 64-bit numbers ("sids") for the Mastodon-compatible API,
owned by tweet-store and computed from the tweet's timeuuid without a lookup.

A Mastodon client parses status ids as integers and compares them, so they
must be numeric and ordered by time (Mastodon's own are millisecond
timestamps shifted left 16 bits plus a sequence). Fanline's tweet ids stay
timeuuids; a sid is a function of the timeuuid:

    sid = unix_ms << 16 | sub         sub = ticks % 10_000 (the 100 ns ticks
                                            within the millisecond, 0..9999)

New tweets get timeuuids *minted* from a snowflake (``SidGenerator``): the
low 16 bits are ``slot << 7 | seq`` (``slot`` 0-63 leased per tweet-store
process, ``seq`` 0-127 per millisecond, so ``sub < 8192``), placed as the
sub-millisecond ticks of the timeuuid, with a fixed clock_seq and node of 0
(the *marker*). So ``sid -> timeuuid`` is exact for every minted id, and the
order of sids is the order of the timeuuids (Cassandra compares timeuuids by
time first; every minted id has a tick of its own).

Tweets written before this scheme (random clock_seq/node) map the same way,
so they sort correctly among the rest and page exactly, but the inverse gives
the marker timeuuid of their tick, which is not their id: they are shown in
timelines but not addressable by sid (``GET /api/v1/statuses/:id`` is 404).
Two such tweets written in the same 100 ns tick would share a sid.

Bounds (``max_id``, ``since_id``, ``min_id``) of any integer, valid or not,
turn into timeuuid bounds that exclude exactly the ticks they should:
``older_than(sid)`` is the marker at the sid's tick (the smallest timeuuid of
that tick in both backends' orders, so ``< bound`` excludes the tick) and
``newer_than(sid)`` the largest timeuuid of the tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import time
import uuid
from collections.abc import Callable

from fanline_shared.errors import Unavailable

from .ports import IdSlots

log = logging.getLogger(__name__)

# Milliseconds from the UUID epoch (1582-10-15) to the Unix epoch.
UUID_EPOCH_MS = 12_219_292_800_000
TICKS_PER_MS = 10_000
SLOT_BITS, SEQ_BITS = 6, 7
SLOTS = 1 << SLOT_BITS  # 64 tweet-store processes mint ids at once
SEQS = 1 << SEQ_BITS  # 128 ids per process and millisecond
MINTED_SUB = SLOTS * SEQS  # 8192: sub-millisecond values a minted id can have
_MAX_TICKS = (1 << 60) - 1  # a timeuuid's time field is 60 bits
_MAX_SID = (1 << 63) - 1
# Ids may run ahead of the clock (a burst past 128/ms, or the clock stepping
# back) by at most this much; past it the generator refuses (503).
MAX_AHEAD_MS = 2000


def _uuid_at(ticks: int, clock_seq: int, node: int) -> uuid.UUID:
    ticks = min(max(ticks, 0), _MAX_TICKS)
    return uuid.UUID(
        fields=(
            ticks & 0xFFFFFFFF,
            (ticks >> 32) & 0xFFFF,
            ((ticks >> 48) & 0x0FFF) | (1 << 12),
            ((clock_seq >> 8) & 0x3F) | 0x80,
            clock_seq & 0xFF,
            node,
        )
    )


def _ticks(sid: int) -> int:
    """The tick a (valid) sid names."""
    return ((sid >> 16) + UUID_EPOCH_MS) * TICKS_PER_MS + (sid & 0xFFFF)


def to_sid(tweet_id: uuid.UUID) -> int:
    """The sid of any timeuuid (minted or not)."""
    ms, sub = divmod(tweet_id.time, TICKS_PER_MS)
    return max(0, ms - UUID_EPOCH_MS) << 16 | sub


def is_minted(tweet_id: uuid.UUID) -> bool:
    """Whether ``tweet_id`` was minted from a sid (and is addressable by it)."""
    return tweet_id.clock_seq == 0 and tweet_id.node == 0 and tweet_id.time % TICKS_PER_MS < MINTED_SUB


def to_timeuuid(sid: int) -> uuid.UUID | None:
    """The minted timeuuid a sid names, or None if no minted id can have it."""
    if not 0 <= sid <= _MAX_SID or sid & 0xFFFF >= MINTED_SUB:
        return None
    ticks = _ticks(sid)
    return _uuid_at(ticks, 0, 0) if ticks <= _MAX_TICKS else None


def parse_sid(raw: str | None) -> int | None:
    """A sid from its decimal text (at most 19 digits), or None."""
    if raw is None or not raw.isascii() or not raw.isdigit() or len(raw) > 19:
        return None
    return int(raw)


def older_than(sid: int) -> uuid.UUID:
    """The exclusive upper bound "strictly older than ``sid``" as a timeuuid."""
    sid = min(max(sid, 0), _MAX_SID)
    if sid & 0xFFFF >= TICKS_PER_MS:  # between two milliseconds: below the next one
        sid = ((sid >> 16) + 1) << 16
    return _uuid_at(_ticks(sid), 0, 0)


def newer_than(sid: int) -> uuid.UUID:
    """The exclusive lower bound "strictly newer than ``sid``" as a timeuuid:
    the largest timeuuid of the sid's tick, in both backends' orders."""
    sid = min(max(sid, 0), _MAX_SID)
    if sid & 0xFFFF >= TICKS_PER_MS:
        sid = sid >> 16 << 16 | (TICKS_PER_MS - 1)
    return _uuid_at(_ticks(sid), 0x3FFF, 0xFFFFFFFFFFFF)


# --- minting -----------------------------------------------------------------------


class SidGenerator:
    """Mints sids (and their timeuuids) under a leased slot.

    ``start`` takes a slot (retrying in the background if none is free);
    a task renews it every third of ``ttl_s``. Ids are minted only while the
    lease is known to hold: until 80 % of ``ttl_s`` after the last
    successful request for it, counted from when the request was *sent*, so a
    process that can no longer renew (storage down, paused) stops minting
    before the slot can pass to anyone else — ``next_sid`` raises
    ``Unavailable`` (503) instead."""

    def __init__(
        self, slots: IdSlots, *, ttl_s: int = 30, clock: Callable[[], float] = time.time, holder: str | None = None
    ) -> None:
        self._slots = slots
        self._ttl_s = ttl_s
        self._clock = clock
        self.holder = holder or f"{os.uname().nodename}:{os.getpid()}:{secrets.token_hex(4)}"
        self.slot: int | None = None
        self._valid_until = 0.0  # time.monotonic() until which the lease holds
        self._last_ms = 0
        self._seq = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        return self.slot is not None and time.monotonic() < self._valid_until

    async def start(self) -> None:
        """Try to take a slot now, then keep the lease in the background."""
        with contextlib.suppress(Unavailable):
            await self._keep()
        self._task = asyncio.create_task(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        slot, self.slot = self.slot, None
        if slot is not None:
            with contextlib.suppress(Unavailable):
                await self._slots.release_slot(slot, self.holder)

    async def _keep(self) -> None:
        """Renew the slot held, or take one; update how long it holds."""
        asked = time.monotonic()
        if self.slot is not None and await self._slots.renew_slot(self.slot, self.holder, self._ttl_s):
            self._valid_until = asked + 0.8 * self._ttl_s
            return
        if self.slot is not None:
            log.warning("id slot %d was lost; taking another", self.slot)
            self.slot = None
        slot = await self._slots.acquire_slot(self.holder, self._ttl_s)
        if slot is None:
            raise Unavailable("every id slot is taken (64 tweet-store processes at most)")
        self.slot = slot
        self._valid_until = asked + 0.8 * self._ttl_s
        log.info("id slot %d taken by %s", slot, self.holder)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._ttl_s / 3 if self.ready else 1.0)
            try:
                await self._keep()
            except Unavailable as exc:
                log.warning("id slot lease not renewed (minting stops when it runs out): %s", exc)

    def next_sid(self) -> int:
        """A new sid, greater than every sid this generator minted before."""
        if not self.ready:
            raise Unavailable("tweet ids cannot be minted: the id slot lease is not held", retry_after=1)
        assert self.slot is not None
        now_ms = int(self._clock() * 1000)
        if now_ms > self._last_ms:
            self._last_ms, self._seq = now_ms, 0
        else:
            # The same millisecond, or the clock stepped back: the next
            # sequence number, borrowing the next millisecond past 127.
            self._seq += 1
            if self._seq >= SEQS:
                self._last_ms, self._seq = self._last_ms + 1, 0
            if self._last_ms - now_ms > MAX_AHEAD_MS:
                raise Unavailable("tweet ids cannot be minted: the clock stepped back", retry_after=1)
        return self._last_ms << 16 | self.slot << SEQ_BITS | self._seq

    def next_timeuuid(self) -> uuid.UUID:
        sid = self.next_sid()
        value = to_timeuuid(sid)
        assert value is not None
        return value


def random_slot_order() -> list[int]:
    """The slots in a random order (acquirers try them in turn, so
    concurrent starters rarely contend for the same one)."""
    order = list(range(SLOTS))
    random.shuffle(order)
    return order
