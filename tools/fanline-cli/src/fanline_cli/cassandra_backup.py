"""Back up and restore one Cassandra keyspace through the driver.

A backup of keyspace K is a directory:

    K/schema.cql          the keyspace's tables, types and indexes (driver metadata)
    K/<table>.jsonl.gz    one line per row: Cassandra's own JSON of it
                          (``SELECT JSON``), with the TTL and write time of
                          every non-key column

Through the driver rather than ``nodetool snapshot`` + ``sstableloader``:
it needs no access to the nodes' disks (it runs from a laptop or the CLI's
Kubernetes Job), and the backup restores into any topology. A table is read
at ``LOCAL_QUORUM`` in token order, page by page, while the system runs, so
the copy is not one instant: a write that lands during the backup may be in
it or not (docs/operations/backup.md says what that means for Fanline).

Restore recreates the keyspace with the target's replication
(``FANLINE_CASSANDRA_RF``/``_DC``, as the services' migrations would), its
tables from ``schema.cql``, then writes every row with ``INSERT … JSON …
DEFAULT UNSET USING TTL ? AND TIMESTAMP ?``, one statement per group of
columns that share a TTL and a write time: what remains of each TTL (rows
that expired since the backup are not written) and the original write
times, so later writes and deletes still win. Counter tables are restored
with ``UPDATE … SET c = c + ?``. Not kept: the TTL of rows that have only
key columns (Cassandra cannot read it), and tombstones.
"""

from __future__ import annotations

import gzip
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cassandra.cluster import Session
from cassandra.concurrent import execute_concurrent
from cassandra.metadata import TableMetadata
from cassandra.query import BatchStatement, BatchType

from fanline_shared.cassandra import prepare
from fanline_shared.config import StorageSettings

PAGE_ROWS = 2000
CONCURRENCY = 64  # writes in flight while restoring
BATCH_ROWS, BATCH_BYTES = 32, 4000  # per unlogged batch (Cassandra warns from 5 KiB)
SCHEMA_FILE = "schema.cql"
# Aliases of each column's TTL and write time in a backed-up row (lower case
# and starting with a letter, so SELECT JSON does not quote them).
TTL_OF, WRITTEN_OF = "fanline_ttl_of_", "fanline_written_of_"


def _quote(name: str) -> str:
    return name if re.fullmatch(r"[a-z_][a-z0-9_]*", name) else '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class TableCounts:
    table: str
    rows: int


@dataclass(frozen=True)
class _Shape:
    """What a table's columns are, for reading and writing its rows."""

    keys: tuple[str, ...]  # partition then clustering
    partition: tuple[str, ...]
    values: tuple[str, ...]  # regular and static, in metadata order
    statics: frozenset[str]
    counters: bool

    @classmethod
    def of(cls, table: TableMetadata) -> _Shape:
        partition = tuple(c.name for c in table.partition_key)
        keys = partition + tuple(c.name for c in table.clustering_key)
        values = tuple(name for name in table.columns if name not in keys)
        return cls(
            keys,
            partition,
            values,
            frozenset(n for n in values if table.columns[n].is_static),
            any(table.columns[n].cql_type == "counter" for n in values),
        )


def backup_keyspace(session: Session, keyspace: str, into: Path) -> list[TableCounts]:
    """Write ``keyspace``'s schema and rows under ``into`` (created)."""
    meta = session.cluster.metadata.keyspaces.get(keyspace)
    if meta is None:
        raise RuntimeError(f"keyspace {keyspace} does not exist")
    into.mkdir(parents=True)
    (into / SCHEMA_FILE).write_text(meta.export_as_string() + "\n")
    counts = []
    for name, table in sorted(meta.tables.items()):
        shape = _Shape.of(table)
        rows = 0
        with gzip.open(into / f"{name}.jsonl.gz", "wt", encoding="utf-8", compresslevel=3) as out:
            for row in _read(session, keyspace, name, shape):
                out.write(row + "\n")
                rows += 1
        counts.append(TableCounts(name, rows))
    return counts


def _read(session: Session, keyspace: str, table: str, shape: _Shape) -> Iterator[str]:
    selectors = [_quote(c) for c in (*shape.keys, *shape.values)]
    if not shape.counters:  # counters have neither TTL nor write time
        for column in shape.values:
            selectors += [f"ttl({_quote(column)}) AS {TTL_OF}{column}", f"writetime({_quote(column)}) AS {WRITTEN_OF}{column}"]
    query = f"SELECT JSON {', '.join(selectors)} FROM {_quote(keyspace)}.{_quote(table)}"
    statement = session.prepare(query)
    statement.fetch_size = PAGE_ROWS
    for row in session.execute(statement):
        yield str(row[0])


def restore_keyspace(
    session: Session, settings: StorageSettings, keyspace: str, source: Path, taken_at: float
) -> list[TableCounts]:
    """Create ``keyspace`` from ``source`` and write its rows; TTLs count down
    from ``taken_at`` (the backup's Unix time). The keyspace must not exist."""
    if keyspace in session.cluster.metadata.keyspaces:
        raise RuntimeError(f"keyspace {keyspace} exists; restore into an empty cluster, or --replace")
    statements = [s.strip() for s in (source / SCHEMA_FILE).read_text().split(";\n") if s.strip()]
    dc = settings.local_dc.replace("'", "''")
    session.execute(
        f"CREATE KEYSPACE {_quote(keyspace)} WITH replication = "
        f"{{'class': 'NetworkTopologyStrategy', '{dc}': {settings.replication_factor}}}"
    )
    for statement in statements:
        if not statement.upper().startswith("CREATE KEYSPACE"):
            session.execute(statement)
    session.cluster.refresh_schema_metadata()
    meta = session.cluster.metadata.keyspaces[keyspace]
    elapsed = max(0, int(time.time() - taken_at))
    counts = []
    for name, table in sorted(meta.tables.items()):
        path = source / f"{name}.jsonl.gz"
        if path.exists():
            counts.append(TableCounts(name, _write(session, keyspace, name, _Shape.of(table), path, elapsed)))
    return counts


def _write(session: Session, keyspace: str, table: str, shape: _Shape, path: Path, elapsed: int) -> int:
    """Write a table's backed-up rows; return how many rows were read."""
    target = f"{_quote(keyspace)}.{_quote(table)}"
    rows = 0

    def counted() -> Iterator[dict[str, Any]]:
        nonlocal rows
        for row in _rows(path):
            rows += 1
            yield row

    if shape.counters:
        # bound in statement order: the increments, then the key
        where = " AND ".join(f"{_quote(k)} = fromJson(?)" for k in shape.keys)
        sets = ", ".join(f"{_quote(c)} = {_quote(c)} + ?" for c in shape.values)
        counter = prepare(session, f"UPDATE {target} SET {sets} WHERE {where}", write=True, idempotent=False)
        _run(
            session,
            (
                (counter, (*(int(row[c] or 0) for c in shape.values), *(json.dumps(row[k]) for k in shape.keys)))
                for row in counted()
            ),
        )
        return rows
    insert = prepare(session, f"INSERT INTO {target} JSON ? DEFAULT UNSET USING TTL ? AND TIMESTAMP ?", write=True)
    plain = prepare(session, f"INSERT INTO {target} JSON ? DEFAULT UNSET", write=True)

    def statements() -> Iterator[tuple[str, Any, tuple[Any, ...]]]:
        seen_statics: set[str] = set()
        for row in counted():
            partition = json.dumps([row[k] for k in shape.partition])
            for columns, ttl, written in _groups(row, shape, seen_statics):
                keys = shape.partition if columns and columns <= shape.statics else shape.keys
                document = json.dumps({name: row[name] for name in (*keys, *sorted(columns))})
                if written is None:  # a row of key columns only
                    yield partition, plain, (document,)
                    continue
                left = 0 if ttl is None else ttl - elapsed  # TTL 0: none (overrides a table default)
                if ttl is not None and left <= 0:
                    continue  # expired since the backup
                yield partition, insert, (document, left, written)

    _run(session, _batched(statements()))
    return rows


def _batched(statements: Iterator[tuple[str, Any, tuple[Any, ...]]]) -> Iterator[tuple[Any, tuple[Any, ...]]]:
    """Consecutive writes to one partition as one unlogged batch (rows come
    back partition by partition, so a home timeline of 800 rows is a few
    round trips, not 800), each under Cassandra's batch-size warning."""
    current: str | None = None
    batch: list[tuple[Any, tuple[Any, ...]]] = []
    size = 0

    def flush() -> Iterator[tuple[Any, tuple[Any, ...]]]:
        if len(batch) == 1:
            yield batch[0]
        elif batch:
            statement = BatchStatement(batch_type=BatchType.UNLOGGED, consistency_level=batch[0][0].consistency_level)
            statement.is_idempotent = True  # every write names its own timestamp
            for prepared, params in batch:
                statement.add(prepared, params)
            yield statement, ()
        batch.clear()

    for partition, prepared, params in statements:
        length = len(params[0])
        if partition != current or len(batch) >= BATCH_ROWS or size + length > BATCH_BYTES:
            yield from flush()
            current, size = partition, 0
        batch.append((prepared, params))
        size += length
    yield from flush()


def _groups(
    row: dict[str, Any], shape: _Shape, seen_statics: set[str]
) -> Iterator[tuple[frozenset[str], int | None, int | None]]:
    """The row's non-null columns grouped by (TTL, write time); static
    columns once per partition; no group but the keys for a key-only row."""
    groups: dict[tuple[bool, int | None, int], set[str]] = {}
    partition = json.dumps([row[k] for k in shape.partition])
    for column in shape.values:
        if row.get(column) is None:
            continue
        static = column in shape.statics
        if static and partition in seen_statics:
            continue
        groups.setdefault((static, row.get(f"{TTL_OF}{column}"), int(row[f"{WRITTEN_OF}{column}"])), set()).add(column)
    if any(static for static, _, _ in groups):
        seen_statics.add(partition)
    has_row = all(row.get(k) is not None for k in shape.keys)  # a static-only partition has null clustering keys
    if not groups and has_row:
        yield frozenset(), None, None
    for (static, ttl, written), columns in groups.items():
        if static or has_row:
            yield frozenset(columns), ttl, written


def _rows(path: Path) -> Iterator[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            value: dict[str, Any] = json.loads(line)
            yield value


def _run(session: Session, statements: Iterator[tuple[Any, tuple[Any, ...]]]) -> None:
    """Execute a stream of statements, ``CONCURRENCY`` in flight; the first
    failure stops the restore (a restore is re-run from the start)."""
    for _ in execute_concurrent(session, statements, concurrency=CONCURRENCY, raise_on_first_error=True, results_generator=True):
        pass
