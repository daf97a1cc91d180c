"""The cap's sampling and background trimming (home_cap.py), with a fake repository."""

from __future__ import annotations

import asyncio
import uuid

from fanline_shared.domain import new_timeuuid, timeuuid_sort_key
from fanline_tweet_store.home_cap import HomeCap
from fanline_tweet_store.ports import TrimOutcome


class FakeHome:
    """Owners' rows in memory, trimmed and counted as the adapters do."""

    def __init__(self) -> None:
        self.rows: dict[str, list[uuid.UUID]] = {}
        self.trimmed: list[tuple[str, int]] = []  # every full count (trim_counted)
        self.newer: list[tuple[str, uuid.UUID, int]] = []  # every count of newer rows

    def add(self, owner: str, ids: list[uuid.UUID]) -> None:
        self.rows.setdefault(owner, []).extend(ids)
        self.rows[owner].sort(key=timeuuid_sort_key, reverse=True)

    async def trim(self, owner: str, keep: int) -> uuid.UUID | None:
        return (await self.trim_counted(owner, keep)).horizon

    async def trim_counted(self, owner: str, keep: int) -> TrimOutcome:
        self.trimmed.append((owner, keep))
        rows = self.rows.get(owner, [])
        counted, newest = min(len(rows), keep + 1), rows[0] if rows else None
        if counted <= keep:
            return TrimOutcome(None, counted, newest)
        del rows[keep:]
        return TrimOutcome(rows[-1], counted, newest)

    async def count_newer(self, owner: str, after: uuid.UUID, limit: int) -> tuple[int, uuid.UUID | None]:
        self.newer.append((owner, after, limit))
        found = [i for i in self.rows.get(owner, []) if timeuuid_sort_key(i) > timeuuid_sort_key(after)][:limit]
        return len(found), found[0] if found else None


def test_sampling_is_about_one_in_an_eighth_of_the_cap_and_deterministic() -> None:
    cap = HomeCap(FakeHome(), 800)  # type: ignore[arg-type]
    assert cap.sample_every == 100
    owners = [f"user{n}" for n in range(20_000)]
    tweet = new_timeuuid()
    sampled = cap.sampled(owners, tweet)
    assert 100 <= len(sampled) <= 300  # expected 200
    assert cap.sampled(owners, tweet) == sampled  # a redelivered page samples the same owners
    assert cap.sampled(owners, new_timeuuid()) != sampled


def test_a_small_cap_trims_on_every_write() -> None:
    cap = HomeCap(FakeHome(), 10)  # type: ignore[arg-type]
    assert cap.sampled(["a", "b"], new_timeuuid()) == ["a", "b"]


async def test_background_trims_deduplicate_owners_and_bound_the_queue() -> None:
    home = FakeHome()
    cap = HomeCap(home, 10, queue_size=3)  # type: ignore[arg-type]
    cap.wrote(["A", "a", "b"], new_timeuuid())
    cap.schedule(["c", "d", "e"])  # d and e do not fit
    cap.start()
    for _ in range(50):
        if len(home.trimmed) == 3:
            break
        await asyncio.sleep(0.01)
    await cap.stop()
    assert sorted(home.trimmed) == [("a", 10), ("b", 10), ("c", 10)]


def _ids(n: int) -> list[uuid.UUID]:
    return [new_timeuuid() for _ in range(n)]


async def test_an_owner_counted_a_moment_ago_is_checked_by_its_newer_rows_only() -> None:
    home, owner = FakeHome(), "reader"
    cap = HomeCap(home, 200, sample_every=25)  # type: ignore[arg-type]
    home.add(owner, _ids(75))
    cap.schedule([owner], full=False)
    await cap.drain()
    assert home.trimmed == [(owner, 200)] and home.newer == []  # nothing known yet: a full count
    first_newest = home.rows[owner][0]
    home.add(owner, _ids(50))
    cap.schedule([owner], full=False)
    await cap.drain()
    # 75 counted, room for 125: only the rows newer than the newest counted are read
    assert home.trimmed == [(owner, 200)] and home.newer == [(owner, first_newest, 126)]
    home.add(owner, _ids(60))  # 185 now: room for 15 more, under a sample's worth
    cap.schedule([owner], full=False)
    await cap.drain()
    assert len(home.newer) == 2 and home.trimmed == [(owner, 200)]
    home.add(owner, _ids(25))  # 210: past the cap
    cap.schedule([owner], full=False)
    await cap.drain()
    assert home.trimmed == [(owner, 200), (owner, 200)] and len(home.newer) == 2  # scanned and trimmed at once
    assert len(home.rows[owner]) == 200


async def test_newer_rows_past_the_room_left_trim_at_once() -> None:
    home, owner = FakeHome(), "reader"
    cap = HomeCap(home, 200, sample_every=25)  # type: ignore[arg-type]
    home.add(owner, _ids(75))
    assert await cap.trim_now(owner) is None
    home.add(owner, _ids(150))  # 225, all newer than the count
    cap.schedule([owner], full=False)
    await cap.drain()
    assert [n[2] for n in home.newer] == [126] and len(home.trimmed) == 2 and len(home.rows[owner]) == 200


async def test_a_merge_or_an_old_count_counts_every_row() -> None:
    home, owner = FakeHome(), "reader"
    cap = HomeCap(home, 200, sample_every=25, remember_s=0.05)  # type: ignore[arg-type]
    older = _ids(150)
    home.add(owner, _ids(75))
    await cap.trim_now(owner)
    home.add(owner, older)  # a follow merge writes rows older than the newest counted: 225 now
    cap.schedule([owner], full=False)
    await cap.drain()  # what the shortcut cannot see (the module's docstring)
    assert len(home.newer) == 1 and len(home.trimmed) == 1 and len(home.rows[owner]) == 225
    cap.schedule([owner], full=False)
    cap.schedule([owner])  # the merge's own trim, the owner already queued: upgraded to a full count
    await cap.drain()
    assert len(home.newer) == 1 and len(home.trimmed) == 2 and len(home.rows[owner]) == 200


async def test_a_count_older_than_remember_s_is_not_used() -> None:
    home, owner = FakeHome(), "reader"
    cap = HomeCap(home, 200, sample_every=25, remember_s=0.05)  # type: ignore[arg-type]
    home.add(owner, _ids(75))
    await cap.trim_now(owner)
    cap.schedule([owner], full=False)
    await cap.drain()
    assert len(home.newer) == 1 and len(home.trimmed) == 1
    await asyncio.sleep(0.06)
    cap.schedule([owner], full=False)
    await cap.drain()
    assert len(home.newer) == 1 and len(home.trimmed) == 2


async def test_the_counts_remembered_are_bounded() -> None:
    home = FakeHome()
    cap = HomeCap(home, 200, sample_every=10, remember_owners=2)  # type: ignore[arg-type]
    for owner in ("a", "b", "c"):
        home.add(owner, _ids(5))
        await cap.trim_now(owner)
    cap.schedule(["a", "c"], full=False)
    await cap.drain()
    assert [n[0] for n in home.newer] == ["c"] and [t[0] for t in home.trimmed] == ["a", "b", "c", "a"]


async def test_a_small_cap_always_scans() -> None:
    home, owner = FakeHome(), "reader"
    cap = HomeCap(home, 10)  # type: ignore[arg-type]
    for _ in range(3):
        home.add(owner, _ids(1))
        cap.wrote([owner], new_timeuuid())
        await cap.drain()
    assert home.newer == [] and len(home.trimmed) == 3
