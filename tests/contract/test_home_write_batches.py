"""tweet-store's fan-out write path in Cassandra: replica batches and
single-row inserts.

The shared home-timeline contract (test_home_timeline.py) runs with the
defaults; this checks the knob an operator can turn — single-row inserts
(``FANLINE_HOME_WRITE_BATCH_ROWS=1``) write the same rows as batches —
against a real node, with a narrow page window so a page takes many rounds.
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
from fanline_tweet_store.home_writes import HomeWrites

from .support import DEFAULT_RETENTION_S, storage_settings

pytestmark = pytest.mark.real_infra


@pytest.fixture
async def storage(real_infra: Any, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[TweetStoreStorage]:
    settings = storage_settings("cassandra", data_dir=tmp_path, prefix=f"t_{secrets.token_hex(4)}", cassandra=real_infra)
    built = build_storage(settings, HomeWrites(DEFAULT_RETENTION_S, page_window=3, batch_rows=request.param))
    await built.start()
    try:
        yield built
    finally:
        try:
            await drop_keyspace(built.engine.session, built.engine.name)
        finally:
            await built.close()


# 437 rows: 44 batches of up to 10, or 437 single-row inserts, 3 in flight.
@pytest.mark.parametrize("storage", [10, 1], indirect=True, ids=["batches-of-10", "single-rows"])
async def test_every_owner_gets_the_row_and_loses_it_again(storage: TweetStoreStorage) -> None:
    owners = [f"owner{i}_{secrets.token_hex(2)}" for i in range(437)]
    tid = new_timeuuid()
    await storage.home.add(owners, tid, "author")
    for owner in owners[::37] + owners[-3:]:
        assert await storage.home.slice(owner, 5, None) == [tid]
    await storage.home.remove(owners[:200], tid)
    assert await storage.home.slice(owners[0], 5, None) == []
    assert await storage.home.slice(owners[199], 5, None) == []
    assert await storage.home.slice(owners[200], 5, None) == [tid]
