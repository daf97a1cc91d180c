"""The gateway's account cache (fanline_api/accounts.py): one load however
many requests wait, no peer call while fresh, refreshed ahead of expiry."""

from __future__ import annotations

import asyncio
from typing import Any

from fanline_api.accounts import AccountCache


class FakeSocial:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.id_calls: list[list[int]] = []
        self.gate: asyncio.Event | None = None

    async def get_users(self, names: list[str]) -> list[dict[str, Any]]:
        self.calls.append(list(names))
        if self.gate is not None:
            await self.gate.wait()
        return [{"username": n.upper(), "id": str(1000 + len(n)), "followers_count": 1} for n in names if n != "ghost"]

    async def accounts(self, ids: list[int]) -> list[dict[str, Any]]:
        self.id_calls.append(list(ids))
        return [{"username": "Ann", "id": str(i)} for i in ids if i == 42]


class FakeTweets:
    async def counts(self, names: list[str]) -> dict[str, int]:
        return {n: 7 for n in names}


async def test_concurrent_reads_share_one_load_and_fresh_reads_cost_nothing() -> None:
    social = FakeSocial()
    social.gate = asyncio.Event()
    cache = AccountCache(social, FakeTweets(), ttl_s=60)  # type: ignore[arg-type]
    readers = [asyncio.create_task(cache.many(["ann", "Bob", "ghost"])) for _ in range(5)]
    await asyncio.sleep(0.01)
    social.gate.set()
    results = await asyncio.gather(*readers)
    assert social.calls == [["ann", "bob", "ghost"]]
    assert all(r == results[0] for r in results) and set(results[0]) == {"ann", "bob"}
    assert results[0]["ann"]["tweets_count"] == 7 and results[0]["bob"]["username"] == "BOB"
    await cache.many(["ANN", "bob"])
    assert len(social.calls) == 1
    await cache.one("ann", fresh=True)
    assert social.calls[-1] == ["ann"]


async def test_entries_are_refreshed_ahead_and_reloaded_after_expiry() -> None:
    social = FakeSocial()
    cache = AccountCache(social, FakeTweets(), ttl_s=0.2)  # type: ignore[arg-type]
    await cache.many(["ann"])
    await asyncio.sleep(0.12)  # past half its time: served, and reloaded behind the read
    assert "ann" in await cache.many(["ann"])
    await asyncio.sleep(0.02)
    assert len(social.calls) == 2
    await asyncio.sleep(0.25)  # expired: the read waits for the load
    await cache.many(["ann"])
    assert len(social.calls) == 3


async def test_ids_resolve_once_and_unknown_ids_are_absent() -> None:
    social = FakeSocial()
    cache = AccountCache(social, FakeTweets(), ttl_s=60)  # type: ignore[arg-type]
    found = await cache.by_ids([42, 7])
    assert list(found) == [42] and found[42]["tweets_count"] == 7
    await cache.by_ids([42])
    assert social.id_calls == [[42, 7]]
