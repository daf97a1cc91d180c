"""tweet-store settings, resolved once from the environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fanline_shared import policies
from fanline_shared.config import Env, HttpSettings, StorageSettings, internal_token

from .cache import DEFAULT_SIZE, DEFAULT_TTL_S, TweetCachePolicy


@dataclass(frozen=True)
class Settings:
    http: HttpSettings
    storage: StorageSettings
    home_retention_s: int
    idempotency_ttl_s: int
    follow_merge_count: int
    home_writes: policies.FanoutYield
    home_write_calls: int
    home_write_batch_rows: int
    tweet_cache: TweetCachePolicy
    internal_token: str | None = None  # FANLINE_INTERNAL_TOKEN (shared/internal_auth.py)

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
            # Fan-out writes in flight per page (Cassandra only): the idle
            # window, and the busy one while user-facing requests were served
            # within the last FANLINE_FANOUT_YIELD_S (policies.FanoutYield).
            home_writes=policies.FanoutYield(
                idle_window=env.integer("FANLINE_HOME_WRITE_WINDOW", policies.DEFAULT_HOME_WRITE_WINDOW, minimum=1),
                busy_window=env.integer("FANLINE_HOME_WRITE_WINDOW_BUSY", policies.DEFAULT_HOME_WRITE_WINDOW_BUSY,
                                        minimum=1),
                quiet_s=env.number("FANLINE_FANOUT_YIELD_S", policies.DEFAULT_FANOUT_YIELD_S),
                busy_rows_per_s=env.number("FANLINE_HOME_WRITE_BUSY_ROWS_PER_S",
                                           policies.DEFAULT_HOME_WRITE_BUSY_ROWS_PER_S),
            ),
            # Fan-out pages written at once per process, whatever the number of
            # workers calling it: pages x window bounds the queue at Cassandra.
            home_write_calls=env.integer("FANLINE_HOME_WRITE_CALLS", policies.DEFAULT_HOME_WRITE_CALLS, minimum=1),
            # Fan-out rows per request (replica-grouped unlogged batches); 1 =
            # single-row inserts. Above 10 the node warns on every batch.
            home_write_batch_rows=env.integer("FANLINE_HOME_WRITE_BATCH_ROWS", policies.DEFAULT_HOME_WRITE_BATCH_ROWS,
                                              minimum=1),
            # Tweets kept in memory for timeline pages (cache.py); size 0 = off.
            tweet_cache=TweetCachePolicy(
                size=env.integer("FANLINE_TWEET_CACHE_SIZE", DEFAULT_SIZE, minimum=0),
                ttl_s=env.number("FANLINE_TWEET_CACHE_TTL_S", DEFAULT_TTL_S),
            ),
            internal_token=internal_token(env),
        )
