"""Storage adapters of social-graph: Cassandra and embedded SQLite.

``build_storage`` picks one by ``settings.backend``; both implement the same
ports (``ports.py``) and pass the same contract tests
(``tests/contract/``). The Cassandra module is imported only when used, so the
embedded default never loads the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fanline_shared.config import StorageSettings
from fanline_shared.outbox.ports import Outbox
from fanline_shared.storage_service.storage import Lifecycle

from ..ports import ActivityRepository, FollowRepository, SessionRepository, UserRepository

OWNER = "social_graph"


@dataclass
class SocialGraphStorage:
    """Everything social-graph stores, behind its ports."""

    users: UserRepository
    sessions: SessionRepository
    follows: FollowRepository
    outbox: Outbox
    engine: Lifecycle = field(repr=False)
    activity: ActivityRepository = field(repr=False)

    async def start(self) -> None:
        """Connect and create or migrate the schema (idempotent)."""
        await self.engine.start()

    async def close(self) -> None:
        """Release connections; safe to call twice."""
        await self.engine.close()

    async def ping(self) -> None:
        """Raise ``Unavailable`` unless the engine answers now."""
        await self.engine.ping()


def build_storage(settings: StorageSettings) -> SocialGraphStorage:
    """The storage for ``settings.backend`` ("embedded" → SQLite, "cassandra")."""
    if settings.backend == "cassandra":
        from .cassandra import build_cassandra_storage

        return build_cassandra_storage(settings)
    if settings.backend == "embedded":
        from .sqlite import build_sqlite_storage

        return build_sqlite_storage(settings)
    raise ValueError(f"unknown storage backend {settings.backend!r}")


__all__ = ["OWNER", "SocialGraphStorage", "build_storage"]
