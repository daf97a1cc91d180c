"""The composed schemas keep every shipped migration at its version.

Migrations are positional (version = index + 1) in both engines, so the
order each service's database has applied must never change. These are the
lists each service spelled out by hand before the outbox's migrations were
composed in (``fanline_shared.storage_service.schema``); a new migration may
only be appended after them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fanline_shared import sqlite as sqlite_outbox
from fanline_shared.cassandra import Keyspace
from fanline_shared.cassandra import outbox as cassandra_outbox
from fanline_shared.config import Env, StorageSettings
from fanline_shared.sqlite import SqliteDatabase
from fanline_shared.storage_service.schema import Migration, compose
from fanline_shared.storage_service.sqlite_engine import SqliteEngine
from fanline_social_graph.adapters import cassandra as sg_cassandra
from fanline_social_graph.adapters import sqlite as sg_sqlite
from fanline_tweet_store.adapters import cassandra_schema as ts_cassandra
from fanline_tweet_store.adapters import sqlite as ts_sqlite

SHIPPED = {
    "social-graph/sqlite": (
        sg_sqlite.MIGRATIONS,
        sqlite_outbox.OUTBOX_MIGRATIONS,
        [
            sg_sqlite.SCHEMA,
            sqlite_outbox.OUTBOX_MIGRATION,
            sqlite_outbox.OUTBOX_PUBLISHED_MIGRATION,
            sg_sqlite.ACTIVITY_MIGRATION,
            sqlite_outbox.OUTBOX_REQUEST_ID_MIGRATION,
            sqlite_outbox.OUTBOX_LEASE_MIGRATION,
            sg_sqlite.MASTODON_MIGRATION,
        ],
    ),
    "tweet-store/sqlite": (
        ts_sqlite.MIGRATIONS,
        sqlite_outbox.OUTBOX_MIGRATIONS,
        [
            ts_sqlite.SCHEMA,
            sqlite_outbox.OUTBOX_MIGRATION,
            sqlite_outbox.OUTBOX_PUBLISHED_MIGRATION,
            ts_sqlite.DELETED_MIGRATION,
            ts_sqlite.HYBRID_MIGRATION,
            sqlite_outbox.OUTBOX_REQUEST_ID_MIGRATION,
            sqlite_outbox.OUTBOX_LEASE_MIGRATION,
            ts_sqlite.ID_SLOTS_MIGRATION,
        ],
    ),
    "social-graph/cassandra": (
        sg_cassandra.MIGRATIONS,
        cassandra_outbox.OUTBOX_MIGRATIONS,
        [
            sg_cassandra.SCHEMA,
            *cassandra_outbox.OUTBOX_TABLES_MIGRATIONS,
            sg_cassandra.ACTIVITY_MIGRATION,
            cassandra_outbox.OUTBOX_REQUEST_ID_MIGRATION,
            cassandra_outbox.OUTBOX_KEEP_MIGRATION,
            cassandra_outbox.OUTBOX_LEASE_MIGRATION,
            sg_cassandra.MASTODON_MIGRATION,
        ],
    ),
    "tweet-store/cassandra": (
        ts_cassandra.MIGRATIONS,
        cassandra_outbox.OUTBOX_MIGRATIONS,
        [
            ts_cassandra.SCHEMA,
            *cassandra_outbox.OUTBOX_TABLES_MIGRATIONS,
            ts_cassandra.DELETED_MIGRATION,
            ts_cassandra.HYBRID_MIGRATION,
            cassandra_outbox.OUTBOX_REQUEST_ID_MIGRATION,
            cassandra_outbox.OUTBOX_KEEP_MIGRATION,
            cassandra_outbox.OUTBOX_LEASE_MIGRATION,
            ts_cassandra.ID_SLOTS_MIGRATION,
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_composed_schema_keeps_every_shipped_version(name: str) -> None:
    own, outbox, shipped = SHIPPED[name]
    assert list(compose(own, outbox)) == shipped


def test_the_engines_compose_the_outbox_in(tmp_path: Path) -> None:
    settings = StorageSettings.from_env(Env({"FANLINE_DATA_DIR": str(tmp_path)}))
    engine = SqliteEngine(SqliteDatabase.for_owner(settings, "x"), sg_sqlite.MIGRATIONS)
    assert list(engine.migrations) == SHIPPED["social-graph/sqlite"][2]
    # The Keyspace composes the same way; building one needs no connection.
    keyspace = Keyspace(settings, "x", ts_cassandra.MIGRATIONS)
    assert list(keyspace.migrations) == SHIPPED["tweet-store/cassandra"][2]


def test_a_new_revision_lands_after_every_shipped_migration() -> None:
    own = [Migration(1, "own-1"), Migration(3, "own-3"), Migration(7, "own-7")]
    outbox = [Migration(1, "box-1"), Migration(4, "box-4"), Migration(7, "box-7")]
    assert compose(own, outbox) == ("own-1", "box-1", "own-3", "box-4", "own-7", "box-7")
