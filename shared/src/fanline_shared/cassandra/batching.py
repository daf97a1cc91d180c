"""Batches with the write consistency.

``batch`` builds a logged or unlogged batch of prepared statements;
``replica_batches`` groups bulk single-row writes into small unlogged batches
whose partitions share their first replica; ``keyed_batches`` does the same
for rows that differ only in their partition key (the fan-out's
home-timeline writes: one tweet to many owners), serializing the shared
values once. Neither is isolated; only a logged batch is atomic.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from cassandra.cluster import Session
from cassandra.query import BatchStatement, BatchType, PreparedStatement

from .connection import SERIAL_CL, WRITE_CL, Params


def batch(statements: Iterable[tuple[PreparedStatement, Sequence[Any]]], *, logged: bool = False) -> BatchStatement:
    """A batch with the write consistency.

    Use unlogged batches only for rows of ONE partition (one mutation on the
    replicas); a logged batch costs a batchlog round trip and is reserved for
    small writes that must be atomic across partitions.
    """
    b = BatchStatement(
        batch_type=BatchType.LOGGED if logged else BatchType.UNLOGGED,
        consistency_level=WRITE_CL,
    )
    b.serial_consistency_level = SERIAL_CL
    for stmt, params in statements:
        b.add(stmt, params)
    return b


def counter_batch(statements: Iterable[tuple[PreparedStatement, Sequence[Any]]]) -> BatchStatement:
    """Counter updates (of any partitions) as one request, with the write
    consistency. Not atomic across partitions, as separate updates are not;
    never idempotent (the driver does not retry it: a retried counter
    update could count twice)."""
    b = BatchStatement(batch_type=BatchType.COUNTER, consistency_level=WRITE_CL)
    for stmt, params in statements:
        b.add(stmt, params)
    return b


def replica_batches(
    session: Session, statement: PreparedStatement, params_seq: Sequence[Params], *, rows: int
) -> list[BatchStatement]:
    """The rows of ``statement`` as small unlogged batches of at most ``rows``
    rows, each holding only partitions whose first replica is the same node.

    For bulk writes of one row to each of many partitions (fan-out): one
    request per batch instead of one per row saves the driver and the node
    most of their per-request work, and grouping by replica keeps each batch
    on the node that owns its partitions (the token-aware policy routes a
    batch by its first statement), so the coordinator forwards nothing it
    would not have forwarded for single rows. Keep ``rows`` at or under the
    node's ``unlogged_batch_across_partitions_warn_threshold`` (10 by
    default): larger batches make the node warn on every request. Not atomic
    and not isolated: a failed batch may have written some of its rows, so
    the writes must be idempotent (a retry rewrites them)."""
    if rows < 1:
        raise ValueError("rows must be >= 1")
    metadata = session.cluster.metadata
    keyspace = statement.keyspace
    groups: dict[Any, list[Any]] = {}
    for params in params_seq:
        bound = statement.bind(params)
        key = bound.routing_key
        replicas = metadata.get_replicas(keyspace, key) if keyspace and key is not None else []
        groups.setdefault(replicas[0] if replicas else None, []).append(bound)
    out: list[BatchStatement] = []
    for bounds in groups.values():
        for start in range(0, len(bounds), rows):
            b = BatchStatement(batch_type=BatchType.UNLOGGED, consistency_level=WRITE_CL)
            for bound in bounds[start : start + rows]:
                b.add(bound)
            out.append(b)
    return out


def keyed_batches(
    session: Session, statement: PreparedStatement, keys: Sequence[Any], shared: Sequence[Any], *, rows: int
) -> list[BatchStatement]:
    """``replica_batches`` of the rows ``(key, *shared)`` for each of
    ``keys``: the same batches, statements and routing, built without a
    ``BoundStatement`` per row.

    ``statement``'s first value must be its whole partition key (a single-
    column key, bound first, as ``INSERT INTO home_timeline (owner_lc, ...)``
    and ``DELETE ... WHERE owner_lc = ? AND ...``); any other statement is
    built by ``replica_batches``. The shared values are serialized once, each
    key once, and a batch holds the serialized values as the driver's own
    ``BatchStatement.add`` would (its ``_add_statement_and_params``): for a
    fan-out page of 1,000 rows the driver's per-row ``bind`` was 3.8 µs of the
    worker's CPU per row and this is 0.3 (``tests/contract``'s equivalence
    test pins the two to the same batches against a real node)."""
    if rows < 1:
        raise ValueError("rows must be >= 1")
    columns = statement.column_metadata or []
    if statement.routing_key_indexes != [0] or len(columns) != 1 + len(shared) or statement.custom_payload:
        return replica_batches(session, statement, [(k, *shared) for k in keys], rows=rows)
    version = statement.protocol_version
    tail = [None if v is None else c.type.serialize(v, version) for c, v in zip(columns[1:], shared, strict=True)]
    serialize, query_id = columns[0].type.serialize, statement.query_id
    # A bound statement's keyspace is its first column's (routing); the
    # replicas are looked up in the statement's, or in that one.
    keyspace = columns[0].keyspace_name
    metadata, replicas_in = session.cluster.metadata, statement.keyspace or keyspace
    groups: dict[Any, list[bytes]] = {}
    for key in keys:
        if key is None:
            raise ValueError("a partition key cannot be null")
        packed = serialize(key, version)
        replicas = metadata.get_replicas(replicas_in, packed) if replicas_in else []
        groups.setdefault(replicas[0] if replicas else None, []).append(packed)
    out: list[BatchStatement] = []
    for packed_keys in groups.values():
        for start in range(0, len(packed_keys), rows):
            b = BatchStatement(batch_type=BatchType.UNLOGGED, consistency_level=WRITE_CL)
            chunk = packed_keys[start : start + rows]
            for packed in chunk:
                b._add_statement_and_params(True, query_id, [packed, *tail])
            # What BatchStatement.add takes from its first bound statement.
            b.routing_key, b.keyspace = chunk[0], keyspace
            out.append(b)
    return out
