"""Cassandra connector and asyncio bridge shared by every Cassandra adapter.

One concern per module; every name importers use is re-exported here, so
``from fanline_shared.cassandra import execute, Keyspace, ...`` keeps working:

* ``connection`` — ``connect``/``open_session``/``close_session`` (blocking
  work off the loop), the execution profile, consistency levels, ``prepare``;
* ``bridge`` — ``execute``, ``execute_lwt``, ``execute_concurrent``,
  ``execute_each``: driver callbacks turned into asyncio results, driver
  failures into ``fanline_shared.errors.Unavailable``, every execution timed
  in ``metrics.CASSANDRA_LATENCY`` and every failure counted in
  ``metrics.CASSANDRA_ERRORS``;
* ``callbacks`` — what runs on the driver thread (hand-off, error
  translation, releasing finished requests); ``window`` — the bounded
  in-flight window behind ``execute_concurrent``/``execute_each``;
* ``batching`` — ``batch``, ``counter_batch``, ``replica_batches``,
  ``keyed_batches``;
* ``migrations`` — ``migrate``: keyspace creation and numbered, idempotent
  migrations;
* ``keyspace`` — ``Keyspace`` (the ``Lifecycle`` port), ``Repository``,
  ``ping``, ``drop_keyspace``;
* ``timeutil`` — ``to_utc``, ``truncate_ms``, ``ttl_until``, ``unix_minute``,
  ``MAX_TTL``;
* ``outbox`` — ``OUTBOX_MIGRATIONS``, ``CassandraOutbox``: the outbox table
  used by every owning service, so the services share one implementation.
"""

from __future__ import annotations

from .batching import batch, counter_batch, keyed_batches, replica_batches
from .bridge import execute, execute_concurrent, execute_each, execute_lwt
from .connection import (
    FETCH_SIZE,
    READ_CL,
    SERIAL_CL,
    WRITE_CL,
    Params,
    Row,
    cached_named_tuple_factory,
    close_session,
    connect,
    open_session,
    prepare,
)
from .keyspace import Keyspace, Repository, drop_keyspace, ping
from .migrations import migrate
from .outbox import (
    OUTBOX_CLOSE_AFTER,
    OUTBOX_KEEP_MIGRATION,
    OUTBOX_LEASE_MIGRATION,
    OUTBOX_MIGRATIONS,
    OUTBOX_REQUEST_ID_MIGRATION,
    OUTBOX_SHARDS,
    CassandraOutbox,
    outbox_partition,
)
from .timeutil import MAX_TTL, to_utc, truncate_ms, ttl_until, unix_minute

__all__ = [
    "FETCH_SIZE",
    "MAX_TTL",
    "OUTBOX_CLOSE_AFTER",
    "OUTBOX_KEEP_MIGRATION",
    "OUTBOX_LEASE_MIGRATION",
    "OUTBOX_MIGRATIONS",
    "OUTBOX_REQUEST_ID_MIGRATION",
    "OUTBOX_SHARDS",
    "READ_CL",
    "SERIAL_CL",
    "WRITE_CL",
    "CassandraOutbox",
    "Keyspace",
    "Params",
    "Repository",
    "Row",
    "batch",
    "cached_named_tuple_factory",
    "close_session",
    "connect",
    "counter_batch",
    "drop_keyspace",
    "execute",
    "execute_concurrent",
    "execute_each",
    "execute_lwt",
    "keyed_batches",
    "migrate",
    "open_session",
    "outbox_partition",
    "ping",
    "prepare",
    "replica_batches",
    "to_utc",
    "truncate_ms",
    "ttl_until",
    "unix_minute",
]
