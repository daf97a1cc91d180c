"""Storage adapters of social-graph: Cassandra and embedded SQLite.

``build_storage`` picks one by ``settings.backend``; both implement the same
ports (``ports.py``) and pass the same contract tests (``tests/contract/``).
The Cassandra module is imported only when used, so the embedded default
never loads the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fanline_shared.config import StorageSettings
from fanline_shared.outbox.ports import Outbox
from fanline_shared.storage_service.storage import Backends, Lifecycle, StorageLifecycle

from ..ports import ActivityRepository, FollowRepository, OAuthRepository, SessionRepository, UserRepository

OWNER = "social_graph"


@dataclass
class SocialGraphStorage(StorageLifecycle):
    """Everything social-graph stores, behind its ports."""

    users: UserRepository
    sessions: SessionRepository
    follows: FollowRepository
    outbox: Outbox
    engine: Lifecycle = field(repr=False)
    activity: ActivityRepository = field(repr=False)
    oauth: OAuthRepository = field(repr=False)  # apps and codes of the Mastodon-compatible API


BACKENDS = Backends[SocialGraphStorage](__name__, embedded=".sqlite", cassandra=".cassandra")


def build_storage(settings: StorageSettings) -> SocialGraphStorage:
    """The storage for ``settings.backend`` ("embedded" → SQLite, "cassandra")."""
    return BACKENDS.build(settings)


__all__ = ["OWNER", "SocialGraphStorage", "build_storage"]
