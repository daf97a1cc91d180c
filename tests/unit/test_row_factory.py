"""The row factory every Cassandra session uses (``cached_named_tuple_factory``):
rows as the driver's own ``named_tuple_factory`` makes them, one class per
column list."""

from __future__ import annotations

from cassandra.query import named_tuple_factory

from fanline_shared.cassandra import cached_named_tuple_factory


def test_rows_are_named_tuples_like_the_drivers() -> None:
    colnames = ["tweet_id", "[applied]", "system.timeuuidasblob(tweet_id)"]
    rows = [(1, True, b"\x00"), (2, False, None)]
    ours = cached_named_tuple_factory(colnames, rows)
    theirs = named_tuple_factory(colnames, rows)
    assert ours == theirs == rows
    assert [r._fields for r in ours] == [r._fields for r in theirs]
    assert ours[0].tweet_id == 1 and ours[0].applied is True and ours[1][2] is None
    assert ours[1]._replace(tweet_id=3) == (3, False, None)  # still a named tuple of its own class


def test_one_class_per_column_list() -> None:
    first = cached_named_tuple_factory(["a", "b"], [(1, 2)])
    again = cached_named_tuple_factory(["a", "b"], [(3, 4)])
    other = cached_named_tuple_factory(["a", "c"], [(5, 6)])
    assert type(first[0]) is type(again[0])
    assert type(first[0]) is not type(other[0])
    assert cached_named_tuple_factory(["a"], []) == []
