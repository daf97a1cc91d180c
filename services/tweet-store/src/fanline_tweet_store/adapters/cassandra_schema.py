"""The tables of tweet-store's keyspace (``cassandra.py`` says how each is
used), as migrations composed with the outbox's by ``Keyspace``."""

from __future__ import annotations

from fanline_shared.storage_service.schema import Migration

SCHEMA = """
CREATE TABLE IF NOT EXISTS {keyspace}.tweets (
    tweet_id timeuuid PRIMARY KEY,
    username text,
    body text
);
CREATE TABLE IF NOT EXISTS {keyspace}.userline (
    username_lc text,
    tweet_id timeuuid,
    PRIMARY KEY (username_lc, tweet_id)
) WITH CLUSTERING ORDER BY (tweet_id DESC);
CREATE TABLE IF NOT EXISTS {keyspace}.public_timeline (
    minute bigint,
    tweet_id timeuuid,
    PRIMARY KEY (minute, tweet_id)
) WITH CLUSTERING ORDER BY (tweet_id DESC);
CREATE TABLE IF NOT EXISTS {keyspace}.public_minutes (
    day int,
    minute bigint,
    PRIMARY KEY (day, minute)
) WITH CLUSTERING ORDER BY (minute DESC);
CREATE TABLE IF NOT EXISTS {keyspace}.public_days (
    shard int,
    day int,
    PRIMARY KEY (shard, day)
) WITH CLUSTERING ORDER BY (day DESC);
CREATE TABLE IF NOT EXISTS {keyspace}.tweet_counts (
    username_lc text PRIMARY KEY,
    tweets counter
);
CREATE TABLE IF NOT EXISTS {keyspace}.home_timeline (
    owner_lc text,
    tweet_id timeuuid,
    author_lc text,
    PRIMARY KEY (owner_lc, tweet_id)
) WITH CLUSTERING ORDER BY (tweet_id DESC);
CREATE TABLE IF NOT EXISTS {keyspace}.idempotency (
    username_lc text,
    key text,
    tweet_id timeuuid,
    body text,
    PRIMARY KEY ((username_lc, key))
);
"""

# Deleted tweets remembered (with a TTL: the idempotency window), so a keyed
# repeat after a delete answers 404 instead of restoring the tweet.
DELETED_MIGRATION = """
CREATE TABLE IF NOT EXISTS {keyspace}.deleted_tweets (
    tweet_id timeuuid PRIMARY KEY
);
"""

# Bounded home timelines and large accounts (docs/architecture.md, "Large
# accounts, inactive users, bounded storage"): the horizon of each home
# timeline is a static column, so it comes back with every slice at no extra
# query; the registry of large accounts is one small partition.
HYBRID_MIGRATION = """
ALTER TABLE {keyspace}.home_timeline ADD IF NOT EXISTS horizon timeuuid static;
ALTER TABLE {keyspace}.home_timeline ADD IF NOT EXISTS regenerated_at timestamp static;
CREATE TABLE IF NOT EXISTS {keyspace}.home_regeneration (
    owner_lc text PRIMARY KEY,
    claimed_at timestamp
);
CREATE TABLE IF NOT EXISTS {keyspace}.large_accounts (
    shard int,
    author_lc text,
    PRIMARY KEY (shard, author_lc)
);
"""

# The leases of the 64 status-id slots (``ports.IdSlots``, ``cassandra_slots.py``).
ID_SLOTS_MIGRATION = """
CREATE TABLE IF NOT EXISTS {keyspace}.id_slots (
    slot int PRIMARY KEY,
    holder text
) WITH gc_grace_seconds = 3600;
"""

# Composed with the outbox's by ``Keyspace`` (``storage_service.schema``).
MIGRATIONS = (
    Migration(1, SCHEMA),
    Migration(3, DELETED_MIGRATION),
    Migration(3, HYBRID_MIGRATION),
    Migration(7, ID_SLOTS_MIGRATION),
)
