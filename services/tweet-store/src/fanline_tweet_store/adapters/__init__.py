"""Storage adapters of tweet-store: Cassandra and embedded SQLite.

``build_storage`` picks one by ``settings.backend``; both implement the same
ports (``ports.py``) and pass the same contract tests
(``tests/contract/``). The Cassandra module is imported only when used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fanline_shared.config import StorageSettings
from fanline_shared.outbox.ports import Outbox
from fanline_shared.storage_service.storage import Backends, Lifecycle, StorageLifecycle

from ..home_writes import HomeWrites
from ..ports import HomeTimelineRepository, IdSlots, LargeAccountRegistry, TweetRepository

OWNER = "tweet_store"


@dataclass
class TweetStoreStorage(StorageLifecycle):
    """Everything tweet-store stores, behind its ports."""

    tweets: TweetRepository
    home: HomeTimelineRepository
    outbox: Outbox
    engine: Lifecycle = field(repr=False)
    large: LargeAccountRegistry = field(repr=False)
    slots: IdSlots = field(repr=False)  # who may mint status ids (sids.py)


BACKENDS = Backends[TweetStoreStorage](__name__, embedded=".sqlite", cassandra=".cassandra")


def build_storage(settings: StorageSettings, home: HomeWrites, busy: Callable[[], bool] = lambda: False) -> TweetStoreStorage:
    """The storage for ``settings.backend``, its home-timeline rows written
    per ``home``; in Cassandra, fan-out writes run under an adaptive limit
    that is stricter while ``busy()`` (user-facing requests are served)."""
    return BACKENDS.build(settings, home, busy)


__all__ = ["OWNER", "TweetStoreStorage", "build_storage"]
