"""Helpers of the contract tests (unique names, disjoint time windows, settings)."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fanline_shared.config import StorageSettings
from fanline_tweet_store.adapters import TweetStoreStorage

DEFAULT_RETENTION_S = 3600


def storage_settings(backend: str, *, data_dir: Path, prefix: str, cassandra: Any = None) -> StorageSettings:
    return StorageSettings(
        backend="cassandra" if backend == "cassandra" else "embedded",
        data_dir=data_dir,
        cassandra_hosts=(cassandra.cassandra_host,) if cassandra else ("127.0.0.1",),
        cassandra_port=cassandra.cassandra_port if cassandra else 9042,
        keyspace_prefix=prefix,
        replication_factor=1,
        local_dc="datacenter1",
        request_timeout_s=10.0,
    )


class Names:
    """Unique, valid usernames (1-15 of [A-Za-z0-9_]) that start with a letter."""

    def user(self, stem: str = "u") -> str:
        name = f"{stem}{secrets.token_hex(4)}"
        assert len(name) <= 15, name
        return name

    def stem(self, length: int = 5) -> str:
        """A random lower-case prefix no other test will share."""
        return "s" + secrets.token_hex(8)[: length - 1]


class Clock:
    """Disjoint time windows for one module (tests share a Cassandra keyspace).

    ``past()`` windows move *back* in time with every call, so each new window
    is older than everything written before it in the module; ``future()``
    windows move forward, so each is newer than everything before it.
    """

    PAST = datetime(2015, 1, 1, tzinfo=UTC)
    FUTURE = datetime(2300, 1, 1, tzinfo=UTC)
    SPAN = timedelta(days=120)

    def __init__(self) -> None:
        self._past = 0
        self._future = 0

    def past(self) -> datetime:
        self._past += 1
        return self.PAST - self._past * self.SPAN

    def future(self) -> datetime:
        self._future += 1
        return self.FUTURE + self._future * self.SPAN


TweetStoreFactory = Callable[..., Awaitable[TweetStoreStorage]]


def tweet_store_service(
    storage: TweetStoreStorage,
    *,
    retention_s: int,
    idempotency_ttl_s: int = 3600,
    merge_count: int = 50,
    max_rows: int = 800,
    following: Callable[[str], Awaitable[list[str]]] | None = None,
    ids: Any = None,
) -> Any:
    """tweet-store's service layer over ``storage``, as its app composes it
    (whom a reader follows: ``following``, default nobody)."""
    from fanline_tweet_store.home_cap import HomeCap
    from fanline_tweet_store.hybrid import HybridHome, HybridPolicy
    from fanline_tweet_store.regeneration import Regenerator
    from fanline_tweet_store.service import TweetStore

    async def nobody(_: str) -> list[str]:
        return []

    hybrid = HybridHome(
        storage.home, storage.tweets, storage.large, following or nobody, retention_s=retention_s, policy=HybridPolicy()
    )
    return TweetStore(
        storage,
        retention_s=retention_s,
        idempotency_ttl_s=idempotency_ttl_s,
        merge_count=merge_count,
        hybrid=hybrid,
        cap=HomeCap(storage.home, max_rows),
        regenerator=Regenerator(storage.home, storage.tweets, hybrid.following, retention_s=retention_s, max_rows=max_rows),
        ids=ids,
    )
