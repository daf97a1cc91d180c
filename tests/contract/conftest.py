"""Contract-test fixtures: every port's tests run once per adapter.

Each test module is written once and parametrised over the backends by the
``backend`` fixture (ids ``sqlite`` and ``cassandra``):

* ``sqlite``: a fresh database file in ``tmp_path`` for every test;
* ``cassandra``: a keyspace with a unique prefix (``t_<random>``) per test
  module, created on first use and dropped when the module finishes (creating
  keyspaces per test would cost seconds each). Tests therefore never assume
  an empty store: they use unique names (``names``) and disjoint time windows
  (``clock``), so they pass whatever else the module's other tests wrote.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fanline_shared.config import StorageSettings
from fanline_social_graph.adapters import SocialGraphStorage
from fanline_social_graph.adapters import build_storage as build_social_graph
from fanline_tweet_store.adapters import TweetStoreStorage
from fanline_tweet_store.adapters import build_storage as build_tweet_store
from fanline_tweet_store.home_writes import HomeWrites

from .support import DEFAULT_RETENTION_S, Clock, Names, TweetStoreFactory, storage_settings

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("cassandra", id="cassandra", marks=pytest.mark.real_infra),
]


@pytest.fixture
def names() -> Names:
    return Names()


@pytest.fixture(scope="module")
def clock() -> Clock:
    return Clock()


class CassandraModuleStores:
    """Storages over this module's keyspaces, created on first use."""

    def __init__(self, infra: Any, tmp: Path) -> None:
        self.infra = infra
        self.prefix = f"t_{secrets.token_hex(4)}"
        self.tmp = tmp
        self._cache: dict[tuple[str, int], Any] = {}

    def settings(self) -> StorageSettings:
        return storage_settings("cassandra", data_dir=self.tmp, prefix=self.prefix, cassandra=self.infra)

    async def social_graph(self) -> SocialGraphStorage:
        key = ("social_graph", 0)
        if key not in self._cache:
            storage = build_social_graph(self.settings())
            await storage.start()
            self._cache[key] = storage
        return self._cache[key]  # type: ignore[no-any-return]

    async def tweet_store(self, retention_s: int) -> TweetStoreStorage:
        key = ("tweet_store", retention_s)
        if key not in self._cache:
            storage = build_tweet_store(self.settings(), HomeWrites(retention_s))
            await storage.start()
            self._cache[key] = storage
        return self._cache[key]  # type: ignore[no-any-return]

    async def close(self) -> None:
        from fanline_shared.cassandra import drop_keyspace

        dropped: set[str] = set()
        for storage in self._cache.values():
            keyspace = storage.engine.name
            try:
                if keyspace not in dropped:
                    await drop_keyspace(storage.engine.session, keyspace)
                    dropped.add(keyspace)
            finally:
                await storage.close()
        self._cache.clear()


@dataclass(frozen=True)
class Backend:
    name: str  # "sqlite" or "cassandra"
    stores: CassandraModuleStores | None = None  # the module's keyspaces (cassandra)

    def __str__(self) -> str:
        return self.name


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    # A sync fixture may pull in the async module-scoped one; async fixtures
    # cannot (the event loop is already running inside them).
    if request.param == "cassandra":
        return Backend("cassandra", request.getfixturevalue("_cassandra_stores"))
    return Backend("sqlite")


@pytest.fixture(scope="module")
async def _cassandra_stores(real_infra: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[CassandraModuleStores]:
    stores = CassandraModuleStores(real_infra, tmp_path_factory.mktemp("cassandra"))
    try:
        yield stores
    finally:
        await stores.close()


async def _sqlite_social_graph(tmp_path: Path) -> SocialGraphStorage:
    storage = build_social_graph(storage_settings("sqlite", data_dir=tmp_path / "data", prefix="test"))
    await storage.start()
    return storage


@pytest.fixture
async def social_graph(backend: Backend, tmp_path: Path) -> AsyncIterator[SocialGraphStorage]:
    if backend.stores is not None:
        yield await backend.stores.social_graph()
        return
    storage = await _sqlite_social_graph(tmp_path)
    try:
        yield storage
    finally:
        await storage.close()


@pytest.fixture
async def make_tweet_store(backend: Backend, tmp_path: Path) -> AsyncIterator[TweetStoreFactory]:
    """``await make_tweet_store(retention_s=...)``: a tweet-store storage."""
    opened: list[TweetStoreStorage] = []

    async def make(retention_s: int = DEFAULT_RETENTION_S) -> TweetStoreStorage:
        if backend.stores is not None:
            return await backend.stores.tweet_store(retention_s)
        settings = storage_settings("sqlite", data_dir=tmp_path / "data", prefix=f"test{len(opened)}")
        storage = build_tweet_store(settings, HomeWrites(retention_s))
        await storage.start()
        opened.append(storage)
        return storage

    try:
        yield make
    finally:
        for storage in opened:
            await storage.close()


@pytest.fixture
async def tweet_store(make_tweet_store: TweetStoreFactory) -> TweetStoreStorage:
    return await make_tweet_store()
