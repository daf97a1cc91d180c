"""tweet-store's fan-out write path in Cassandra: replica batches and pacing.

The shared home-timeline contract (test_home_timeline.py) runs with the
defaults; this checks the knobs an operator can turn — single-row inserts
(``FANLINE_HOME_WRITE_BATCH_ROWS=1``) write the same rows, and the pacing hook
sees every row, a few requests at a time — against a real node.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from fanline_shared.cassandra import drop_keyspace
from fanline_shared.domain import new_timeuuid
from fanline_tweet_store.adapters import TweetStoreStorage, build_storage

from .support import DEFAULT_RETENTION_S, storage_settings

pytestmark = pytest.mark.real_infra


@pytest.fixture
async def paced(
    real_infra: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[TweetStoreStorage, list[tuple[int, float]]]]:
    calls: list[tuple[int, float]] = []

    async def pace(rows: int, elapsed_s: float) -> None:
        calls.append((rows, elapsed_s))

    settings = storage_settings("cassandra", data_dir=tmp_path, prefix=f"t_{secrets.token_hex(4)}", cassandra=real_infra)
    storage = build_storage(
        settings,
        home_retention_s=DEFAULT_RETENTION_S,
        home_write_window=3,
        home_write_batch_rows=request.param,
        home_write_pace=pace,
    )
    await storage.start()
    try:
        yield storage, calls
    finally:
        try:
            await drop_keyspace(storage.engine.session, storage.engine.name)
        finally:
            await storage.close()


# 437 rows in batches of 10 = 44 requests, paced every 16: 160 + 160 + 117
# rows; then 200 removals = 20 requests: 160 + 40. Single-row inserts are
# governed by the window alone, as before batching: no pace calls.
@pytest.mark.parametrize(
    ("paced", "paced_rows"), [(10, [160, 160, 117, 160, 40]), (1, [])], indirect=["paced"], ids=["batches-of-10", "single-rows"]
)
async def test_every_owner_gets_the_row_and_the_pace_sees_every_row(
    paced: tuple[TweetStoreStorage, list[tuple[int, float]]], paced_rows: list[int]
) -> None:
    storage, calls = paced
    owners = [f"owner{i}_{secrets.token_hex(2)}" for i in range(437)]
    tid = new_timeuuid()
    await storage.home.add(owners, tid, "author")
    for owner in owners[::37] + owners[-3:]:
        assert await storage.home.slice(owner, 5, None) == [tid]
    await storage.home.remove(owners[:200], tid)
    assert await storage.home.slice(owners[0], 5, None) == []
    assert await storage.home.slice(owners[199], 5, None) == []
    assert await storage.home.slice(owners[200], 5, None) == [tid]
    assert [rows for rows, _ in calls] == paced_rows
    assert all(elapsed >= 0 for _, elapsed in calls)
