"""Storage adapters of tweet-store: Cassandra and embedded SQLite.

``build_storage`` picks one by ``settings.backend``; both implement the same
ports (``ports.py``) and pass the same contract tests
(``tests/contract/``). The Cassandra module is imported only when used.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from fanline_shared import policies
from fanline_shared.config import StorageSettings
from fanline_shared.outbox.ports import Outbox
from fanline_shared.storage_service.storage import Backends, Lifecycle, StorageLifecycle

from ..limiter import AdaptiveLimit
from ..ports import HomeTimelineRepository, LargeAccountRegistry, TweetRepository

OWNER = "tweet_store"


@dataclass
class TweetStoreStorage(StorageLifecycle):
    """Everything tweet-store stores, behind its ports."""

    tweets: TweetRepository
    home: HomeTimelineRepository
    outbox: Outbox
    engine: Lifecycle = field(repr=False)
    large: LargeAccountRegistry = field(repr=False)


BACKENDS = Backends[TweetStoreStorage](__name__, embedded=".sqlite", cassandra=".cassandra")


def build_storage(
    settings: StorageSettings,
    *,
    home_retention_s: int,
    home_write_window: int | Callable[[], int] = policies.DEFAULT_HOME_WRITE_WINDOW,
    home_write_calls: int = policies.DEFAULT_HOME_WRITE_CALLS,
    home_write_batch_rows: int = policies.DEFAULT_HOME_WRITE_BATCH_ROWS,
    home_write_pace: Callable[[int, float], Awaitable[None]] | None = None,
    home_write_limit: AdaptiveLimit | None = None,
) -> TweetStoreStorage:
    """The storage for ``settings.backend``; home-timeline rows live
    ``home_retention_s`` seconds after their tweet's creation. In Cassandra,
    fan-out writes run ``home_write_window`` at a time per page (a number, or
    a function asked as writes complete) and ``home_write_calls`` pages at a
    time per process, each write a batch of up to ``home_write_batch_rows``
    rows, ``home_write_pace`` awaited every few batches (it may sleep); with
    ``home_write_limit``, every request runs under that adaptive limit
    instead, ``home_write_window`` per page, no page waiting for another."""
    if home_retention_s <= 0:
        raise ValueError("home_retention_s must be positive")
    if settings.backend == "embedded":
        return BACKENDS.build(settings, home_retention_s=home_retention_s)
    return BACKENDS.build(
        settings,
        home_retention_s=home_retention_s,
        home_write_window=home_write_window,
        home_write_calls=home_write_calls,
        home_write_batch_rows=home_write_batch_rows,
        home_write_pace=home_write_pace,
        home_write_limit=home_write_limit,
    )


__all__ = ["OWNER", "TweetStoreStorage", "build_storage"]
