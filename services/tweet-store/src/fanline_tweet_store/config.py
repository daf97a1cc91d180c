"""tweet-store settings, resolved once from the environment."""

from __future__ import annotations

from dataclasses import dataclass

from fanline_shared import policies
from fanline_shared.config import PeerSettings
from fanline_shared.env_settings import env_field, env_int
from fanline_shared.storage_service.settings import StorageServiceSettings

from .cache import DEFAULT_SIZE, DEFAULT_TTL_S, TweetCachePolicy
from .home_writes import HomeWrites
from .hybrid import HybridPolicy
from .limiter import LimitPolicy

DEFAULT_HOME_MAX_ROWS = 800


@dataclass(frozen=True, kw_only=True)
class Settings(StorageServiceSettings):
    SERVICE = "tweet-store"
    PORT = 8002
    ADMISSION = policies.TWEET_STORE_ADMISSION

    idempotency_ttl_s: int = env_int("FANLINE_IDEMPOTENCY_TTL_S", 24 * 3600, minimum=1)
    # How many of an author's recent tweets a new follower receives.
    follow_merge_count: int = env_int("FANLINE_FOLLOW_MERGE_COUNT", 200, minimum=50)
    # Home-timeline rows: they expire FANLINE_HOME_RETENTION_S after their
    # tweet; fan-out writes (Cassandra only) are replica-grouped unlogged
    # batches of FANLINE_HOME_WRITE_BATCH_ROWS rows (1 = single-row inserts;
    # above 10 the node warns on every batch), FANLINE_HOME_WRITE_WINDOW in
    # flight per page, all under the process's adaptive limit (limiter.py).
    home: HomeWrites = env_field(
        lambda env: HomeWrites(
            retention_s=env.integer("FANLINE_HOME_RETENTION_S", 30 * 24 * 3600, minimum=60),
            page_window=env.integer("FANLINE_HOME_WRITE_WINDOW", policies.DEFAULT_HOME_WRITE_WINDOW, minimum=1),
            batch_rows=env.integer("FANLINE_HOME_WRITE_BATCH_ROWS", policies.DEFAULT_HOME_WRITE_BATCH_ROWS, minimum=1),
            limit=LimitPolicy(
                maximum=env.integer("FANLINE_FANOUT_LIMIT_MAX", LimitPolicy.maximum, minimum=1),
                busy_tolerance=env.number("FANLINE_FANOUT_BUSY_TOLERANCE", LimitPolicy.busy_tolerance, positive=True),
                idle_tolerance=env.number("FANLINE_FANOUT_IDLE_TOLERANCE", LimitPolicy.idle_tolerance, positive=True),
                probe=env.boolean("FANLINE_FANOUT_LIMIT_PROBE", LimitPolicy.probe),
            ),
        )
    )
    # The adaptive limit is stricter while a user-facing request was served
    # within FANLINE_FANOUT_YIELD_S (priority.py).
    fanout_yield: policies.FanoutYield = env_field(
        lambda env: policies.FanoutYield(quiet_s=env.number("FANLINE_FANOUT_YIELD_S", policies.DEFAULT_FANOUT_YIELD_S))
    )
    # Tweets kept in memory for timeline pages (cache.py); size 0 = off.
    tweet_cache: TweetCachePolicy = env_field(
        lambda env: TweetCachePolicy(
            size=env.integer("FANLINE_TWEET_CACHE_SIZE", DEFAULT_SIZE, minimum=0),
            ttl_s=env.number("FANLINE_TWEET_CACHE_TTL_S", DEFAULT_TTL_S),
        )
    )
    # Stored rows per home timeline (home_cap.py); older items are read from the
    # followed accounts' userlines (hybrid.py).
    home_max_rows: int = env_int("FANLINE_HOME_MAX_ROWS", DEFAULT_HOME_MAX_ROWS, minimum=10)
    # How stale the inputs of a home read may be (hybrid.py).
    hybrid: HybridPolicy = env_field(
        lambda env: HybridPolicy(
            registry_ttl_s=env.number("FANLINE_LARGE_REGISTRY_CACHE_S", HybridPolicy.registry_ttl_s),
            recent_ttl_s=env.number("FANLINE_LARGE_RECENT_CACHE_S", HybridPolicy.recent_ttl_s),
            following_ttl_s=env.number("FANLINE_FOLLOWING_CACHE_S", HybridPolicy.following_ttl_s),
        )
    )
    # Home reads ask social-graph whom the reader follows.
    peers: PeerSettings = env_field(PeerSettings.from_env)
    # How long a process's lease of a status-id slot lasts unrenewed (sids.py).
    id_slot_lease_s: int = env_int("FANLINE_ID_SLOT_LEASE_S", 30, minimum=3)
