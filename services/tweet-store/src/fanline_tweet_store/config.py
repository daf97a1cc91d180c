"""tweet-store settings, resolved once from the environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fanline_shared import policies
from fanline_shared.config import Env, HttpSettings, PeerSettings, StorageSettings, admission_policy, internal_token

from .cache import DEFAULT_SIZE, DEFAULT_TTL_S, TweetCachePolicy
from .hybrid import HybridPolicy
from .limiter import LimitPolicy

DEFAULT_HOME_MAX_ROWS = 800


@dataclass(frozen=True)
class Settings:
    http: HttpSettings
    storage: StorageSettings
    home_retention_s: int
    idempotency_ttl_s: int
    follow_merge_count: int
    home_writes: policies.FanoutYield
    fanout_limit: LimitPolicy
    home_write_batch_rows: int
    tweet_cache: TweetCachePolicy
    home_max_rows: int
    hybrid: HybridPolicy
    peers: PeerSettings
    # FANLINE_INTERNAL_TOKEN (shared/internal_auth.py); a secret: never in a repr.
    internal_token: str | None = field(default=None, repr=False)
    admission: policies.AdmissionPolicy = policies.TWEET_STORE_ADMISSION

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        env = Env(environ)
        return cls(
            http=HttpSettings.from_env(env, "TWEET_STORE", 8002),
            storage=StorageSettings.from_env(env),
            # Home-timeline rows expire this long after the tweet was created.
            home_retention_s=env.integer("FANLINE_HOME_RETENTION_S", 30 * 24 * 3600, minimum=60),
            idempotency_ttl_s=env.integer("FANLINE_IDEMPOTENCY_TTL_S", 24 * 3600, minimum=1),
            # How many of an author's recent tweets a new follower receives.
            follow_merge_count=env.integer("FANLINE_FOLLOW_MERGE_COUNT", 200, minimum=50),
            # Fan-out writes (Cassandra only): requests in flight per page under
            # the process's adaptive limit (limiter.py), which is stricter
            # while a user-facing request was served within
            # FANLINE_FANOUT_YIELD_S.
            home_writes=policies.FanoutYield(
                page_window=env.integer("FANLINE_HOME_WRITE_WINDOW", policies.DEFAULT_HOME_WRITE_WINDOW, minimum=1),
                quiet_s=env.number("FANLINE_FANOUT_YIELD_S", policies.DEFAULT_FANOUT_YIELD_S),
            ),
            fanout_limit=LimitPolicy(
                maximum=env.integer("FANLINE_FANOUT_LIMIT_MAX", LimitPolicy.maximum, minimum=1),
                busy_tolerance=env.number("FANLINE_FANOUT_BUSY_TOLERANCE", LimitPolicy.busy_tolerance, positive=True),
                idle_tolerance=env.number("FANLINE_FANOUT_IDLE_TOLERANCE", LimitPolicy.idle_tolerance, positive=True),
                probe=env.boolean("FANLINE_FANOUT_LIMIT_PROBE", LimitPolicy.probe),
            ),
            # Fan-out rows per request (replica-grouped unlogged batches); 1 =
            # single-row inserts. Above 10 the node warns on every batch.
            home_write_batch_rows=env.integer("FANLINE_HOME_WRITE_BATCH_ROWS", policies.DEFAULT_HOME_WRITE_BATCH_ROWS, minimum=1),
            # Tweets kept in memory for timeline pages (cache.py); size 0 = off.
            tweet_cache=TweetCachePolicy(
                size=env.integer("FANLINE_TWEET_CACHE_SIZE", DEFAULT_SIZE, minimum=0),
                ttl_s=env.number("FANLINE_TWEET_CACHE_TTL_S", DEFAULT_TTL_S),
            ),
            # Stored rows per home timeline (cap.py); older items are read
            # from the followed accounts' userlines (hybrid.py).
            home_max_rows=env.integer("FANLINE_HOME_MAX_ROWS", DEFAULT_HOME_MAX_ROWS, minimum=10),
            # How stale the inputs of a home read may be (hybrid.py).
            hybrid=HybridPolicy(
                registry_ttl_s=env.number("FANLINE_LARGE_REGISTRY_CACHE_S", HybridPolicy.registry_ttl_s),
                recent_ttl_s=env.number("FANLINE_LARGE_RECENT_CACHE_S", HybridPolicy.recent_ttl_s),
                following_ttl_s=env.number("FANLINE_FOLLOWING_CACHE_S", HybridPolicy.following_ttl_s),
            ),
            # Home reads ask social-graph whom the reader follows.
            peers=PeerSettings.from_env(env),
            internal_token=internal_token(env),
            admission=admission_policy(env, policies.TWEET_STORE_ADMISSION),
        )
