"""Status ids (tweet-store's sids.py): the sid <-> timeuuid mapping, its
order, the bounds of max_id/since_id/min_id, and the minting generator."""

from __future__ import annotations

import random
import time
import uuid
from datetime import UTC, datetime

import pytest

from fanline_shared.domain import new_timeuuid, timeuuid_sort_key, timeuuid_time
from fanline_shared.errors import Unavailable
from fanline_tweet_store import sids
from fanline_tweet_store.sids import SidGenerator, is_minted, newer_than, older_than, to_sid, to_timeuuid

# 2026-11-26T13:34:22.388Z in Unix milliseconds.
MS = 1_795_700_062_388


def minted(ms: int, slot: int, seq: int) -> int:
    return ms << 16 | slot << 7 | seq


@pytest.mark.parametrize(("slot", "seq"), [(0, 0), (63, 127), (5, 9), (1, 0)])
def test_a_minted_sid_round_trips_through_its_timeuuid(slot: int, seq: int) -> None:
    sid = minted(MS, slot, seq)
    value = to_timeuuid(sid)
    assert value is not None and value.version == 1 and is_minted(value)
    assert to_sid(value) == sid
    assert value.clock_seq == 0 and value.node == 0
    # The timeuuid's time is the sid's millisecond (plus less than one).
    moment = timeuuid_time(value)
    assert int(moment.timestamp() * 1000) == MS


def test_the_order_of_sids_is_the_order_of_timeuuids() -> None:
    rng = random.Random(7)
    values = [minted(MS + rng.randrange(0, 50), rng.randrange(64), rng.randrange(128)) for _ in range(2000)]
    values = sorted(set(values))
    as_uuids = [to_timeuuid(v) for v in values]
    assert all(u is not None for u in as_uuids)
    by_key = sorted(as_uuids, key=lambda u: timeuuid_sort_key(u))  # type: ignore[arg-type]
    assert [to_sid(u) for u in by_key] == values  # type: ignore[arg-type]


def test_legacy_timeuuids_sort_among_minted_ones_by_time() -> None:
    """A tweet written before sids (random node) keeps its place in time:
    its sid orders exactly as its timeuuid does, but it is not addressable."""
    when = datetime(2026, 11, 26, 13, 34, 22, 388_451, tzinfo=UTC)
    legacy = new_timeuuid(when)
    assert not is_minted(legacy)
    sid = to_sid(legacy)
    assert sid >> 16 == MS and (sid & 0xFFFF) == 4510  # 0.4510 ms into the millisecond
    earlier, later = minted(MS, 0, 0), minted(MS + 1, 0, 0)
    assert earlier < sid < later
    assert timeuuid_sort_key(to_timeuuid(earlier)) < timeuuid_sort_key(legacy) < timeuuid_sort_key(to_timeuuid(later))  # type: ignore[arg-type]
    # The inverse is the marker of that tick, not the tweet's id: 404, by design.
    assert to_timeuuid(sid) != legacy


@pytest.mark.parametrize(
    "raw",
    [-1, 1 << 63, MS << 16 | 8192, MS << 16 | 0xFFFF],
    ids=["negative", "past-64-bits", "sub-8192", "sub-ffff"],
)
def test_numbers_no_minted_id_can_have_map_to_nothing(raw: int) -> None:
    assert to_timeuuid(raw) is None


@pytest.mark.parametrize("raw", ["", "12a", "١٢", "1" * 20, "-5", " 5"])
def test_parse_sid_takes_only_plain_decimal_digits(raw: str) -> None:
    assert sids.parse_sid(raw) is None


def test_bounds_exclude_exactly_the_named_id() -> None:
    key = timeuuid_sort_key
    ids = [to_timeuuid(minted(MS + d, 3, s)) for d in range(3) for s in range(3)]
    middle = minted(MS + 1, 3, 1)
    this = to_timeuuid(middle)
    assert this is not None
    older = [u for u in ids if key(u) < key(older_than(middle))]  # type: ignore[arg-type]
    newer = [u for u in ids if key(u) > key(newer_than(middle))]  # type: ignore[arg-type]
    assert this not in older and this not in newer
    assert len(older) + len(newer) == len(ids) - 1
    assert all(to_sid(u) < middle for u in older) and all(to_sid(u) > middle for u in newer)  # type: ignore[arg-type]


@pytest.mark.parametrize("sub", [8192, 9999, 10_000, 0xFFFF])
def test_bounds_from_sids_between_ticks_fall_between_them(sub: int) -> None:
    """A client may send any number: those past the minted range (or past the
    ticks of a millisecond) still split the ids at the right place."""
    bound = MS << 16 | sub
    below, above = to_timeuuid(minted(MS, 63, 127)), to_timeuuid(minted(MS + 1, 0, 0))
    assert below is not None and above is not None
    key = timeuuid_sort_key
    assert key(below) < key(older_than(bound)) <= key(above)
    assert key(below) <= key(newer_than(bound)) < key(above)


def test_huge_and_negative_bounds_are_clamped() -> None:
    assert timeuuid_sort_key(older_than(-5)) <= timeuuid_sort_key(older_than(0))
    far = older_than((1 << 63) - 1)
    assert far.version == 1
    assert timeuuid_sort_key(to_timeuuid(minted(MS, 0, 0))) < timeuuid_sort_key(far)  # type: ignore[arg-type]


# --- the generator ---------------------------------------------------------------


class FakeSlots:
    def __init__(self, free: bool = True) -> None:
        self.free = free
        self.renewals = 0
        self.renew_ok = True
        self.released: list[int] = []

    async def acquire_slot(self, holder: str, ttl_s: int) -> int | None:
        return 9 if self.free else None

    async def renew_slot(self, slot: int, holder: str, ttl_s: int) -> bool:
        self.renewals += 1
        return self.renew_ok

    async def release_slot(self, slot: int, holder: str) -> None:
        self.released.append(slot)


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


async def test_minted_ids_carry_the_slot_and_rise_within_a_millisecond() -> None:
    clock = Clock(MS)
    gen = SidGenerator(FakeSlots(), clock=clock)
    await gen.start()
    try:
        first, second = gen.next_sid(), gen.next_sid()
        assert first >> 16 == MS and (first >> 7) & 63 == 9
        assert second == first + 1
        clock.ms += 5
        assert gen.next_sid() == minted(MS + 5, 9, 0)
    finally:
        await gen.close()


async def test_past_128_ids_in_a_millisecond_the_next_millisecond_is_borrowed() -> None:
    clock = Clock(MS)
    gen = SidGenerator(FakeSlots(), clock=clock)
    await gen.start()
    try:
        made = [gen.next_sid() for _ in range(300)]
        assert made == sorted(set(made))
        assert made[128] == minted(MS + 1, 9, 0) and made[256] == minted(MS + 2, 9, 0)
        clock.ms += 1  # the clock catches up with a borrowed millisecond: still rising
        assert gen.next_sid() > made[-1]
    finally:
        await gen.close()


async def test_a_clock_stepping_back_never_repeats_an_id_and_a_large_step_refuses() -> None:
    clock = Clock(MS)
    gen = SidGenerator(FakeSlots(), clock=clock)
    await gen.start()
    try:
        before = gen.next_sid()
        clock.ms -= 500
        after = gen.next_sid()
        assert after > before
        clock.ms -= sids.MAX_AHEAD_MS + 10
        with pytest.raises(Unavailable):
            gen.next_sid()
    finally:
        await gen.close()


async def test_without_a_slot_nothing_is_minted() -> None:
    gen = SidGenerator(FakeSlots(free=False), clock=Clock(MS))
    await gen.start()
    try:
        assert not gen.ready
        with pytest.raises(Unavailable):
            gen.next_sid()
    finally:
        await gen.close()


async def test_minting_stops_when_the_lease_runs_out_unrenewed(monkeypatch: pytest.MonkeyPatch) -> None:
    slots = FakeSlots()
    gen = SidGenerator(slots, ttl_s=10, clock=Clock(MS))
    await gen.start()
    try:
        gen.next_sid()
        now = time.monotonic()
        monkeypatch.setattr(sids.time, "monotonic", lambda: now + 8.5)  # past 80 % of the TTL
        with pytest.raises(Unavailable):
            gen.next_sid()
        # A renewal that succeeds brings it back; a lost slot is replaced.
        slots.renew_ok = False
        await gen._keep()
        monkeypatch.setattr(sids.time, "monotonic", lambda: now + 9)
        assert gen.ready and gen.slot == 9
    finally:
        await gen.close()
    assert slots.released == [9]


def test_timeuuids_minted_from_sids_are_valid_version_1_uuids() -> None:
    value = to_timeuuid(minted(MS, 1, 2))
    assert value is not None
    assert uuid.UUID(str(value)) == value and value.variant == uuid.RFC_4122
