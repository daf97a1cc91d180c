"""Batches with the write consistency.

``batch`` builds a logged or unlogged batch of prepared statements;
``replica_batches`` groups bulk single-row writes into small unlogged batches
whose partitions share their first replica (the fan-out's home-timeline
writes). Neither is isolated; only a logged batch is atomic.
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
