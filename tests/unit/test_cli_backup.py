"""How ``fanline restore`` splits a backed-up Cassandra row into writes
(``cassandra_backup._groups``): columns that share a TTL and a write time go
in one INSERT, static columns once per partition, a key-only row as itself.
The whole backup and restore runs against real Cassandra in
tests/e2e/test_backup_restore.py."""

from __future__ import annotations

from typing import Any

from cassandra.query import BatchStatement, SimpleStatement

from fanline_cli.cassandra_backup import BATCH_ROWS, TTL_OF, WRITTEN_OF, _batched, _groups, _Shape

HOME = _Shape(
    keys=("owner_lc", "tweet_id"),
    partition=("owner_lc",),
    values=("author_lc", "horizon"),
    statics=frozenset({"horizon"}),
    counters=False,
)


def row(owner: str, tweet: str | None, author: str | None, horizon: str | None, **meta: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"owner_lc": owner, "tweet_id": tweet, "author_lc": author, "horizon": horizon}
    for column in HOME.values:
        out[f"{TTL_OF}{column}"] = meta.get(f"ttl_{column}")
        out[f"{WRITTEN_OF}{column}"] = meta.get(f"wt_{column}")
    return out


def test_a_row_with_a_ttl_and_its_partitions_static_once() -> None:
    seen: set[str] = set()
    first = list(_groups(row("ada", "t1", "bob", "h", ttl_author_lc=100, wt_author_lc=5, wt_horizon=7), HOME, seen))
    assert sorted(first, key=str) == sorted([(frozenset({"author_lc"}), 100, 5), (frozenset({"horizon"}), None, 7)], key=str)
    second = list(_groups(row("ada", "t2", "cy", "h", ttl_author_lc=90, wt_author_lc=6, wt_horizon=7), HOME, seen))
    assert second == [(frozenset({"author_lc"}), 90, 6)], "the static column is written once per partition"


def test_a_partition_with_only_its_static_row() -> None:
    assert list(_groups(row("eve", None, None, "h", wt_horizon=3), HOME, set())) == [(frozenset({"horizon"}), None, 3)]


def test_a_row_of_key_columns_only() -> None:
    deleted = _Shape(keys=("tweet_id",), partition=("tweet_id",), values=(), statics=frozenset(), counters=False)
    assert list(_groups({"tweet_id": "t9"}, deleted, set())) == [(frozenset(), None, None)]


def test_columns_written_at_different_times_are_separate_writes() -> None:
    shape = _Shape(keys=("k",), partition=("k",), values=("a", "b"), statics=frozenset(), counters=False)
    r = {"k": "x", "a": 1, "b": 2, f"{TTL_OF}a": None, f"{WRITTEN_OF}a": 10, f"{TTL_OF}b": None, f"{WRITTEN_OF}b": 20}
    assert sorted(_groups(r, shape, set()), key=str) == [(frozenset({"a"}), None, 10), (frozenset({"b"}), None, 20)]


def test_writes_to_one_partition_go_in_batches_and_partitions_never_mix() -> None:
    p = SimpleStatement("INSERT INTO k.t JSON %s DEFAULT UNSET USING TTL %s AND TIMESTAMP %s")
    writes = [("a", p, (f"doc{i}", 0, 1)) for i in range(BATCH_ROWS + 3)] + [("b", p, ("doc", 0, 1))]
    out = list(_batched(iter(writes)))
    assert [type(s).__name__ for s, _ in out] == ["BatchStatement", "BatchStatement", "SimpleStatement"]
    first, second = out[0][0], out[1][0]
    assert isinstance(first, BatchStatement) and isinstance(second, BatchStatement)
    assert len(first._statements_and_parameters) == BATCH_ROWS and len(second._statements_and_parameters) == 3
    assert first.is_idempotent
