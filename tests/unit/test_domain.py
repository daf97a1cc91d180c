"""Validation rules and time-based ids (shared/domain.py)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from fanline_shared import domain
from fanline_shared.errors import InvalidInput


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("a", True),
        ("A_1", True),
        ("x" * 15, True),
        ("", False),
        ("x" * 16, False),
        ("a-b", False),
        ("é", False),
        (" a", False),
        (None, False),
        (7, False),
    ],
    ids=["one", "mixed", "fifteen", "empty", "sixteen", "dash", "accent", "space", "none", "int"],
)
def test_username_rule(value: object, ok: bool) -> None:
    if ok:
        assert domain.validate_username(value) == value
    else:
        with pytest.raises(InvalidInput) as err:
            domain.validate_username(value)
        assert err.value.code == "invalid_username"


@pytest.mark.parametrize(
    ("body", "expected"),
    [("  hi  ", "hi"), ("x" * 280, "x" * 280), ("😀" * 280, "😀" * 280), ("\n\tyo\n", "yo")],
    ids=["trim", "280", "280-emoji", "tabs"],
)
def test_body_trimmed(body: str, expected: str) -> None:
    assert domain.validate_body(body) == expected


@pytest.mark.parametrize("body", ["", "   ", "x" * 281, None, 3, "a\x00b"], ids=["empty", "blank", "281", "none", "int", "nul"])
def test_body_rejected(body: object) -> None:
    with pytest.raises(InvalidInput) as err:
        domain.validate_body(body)
    assert err.value.code == "invalid_body"


@pytest.mark.parametrize(("raw", "value"), [(None, 20), ("", 20), ("1", 1), ("100", 100)])
def test_limit_ok(raw: str | None, value: int) -> None:
    assert domain.validate_limit(raw) == value


@pytest.mark.parametrize("raw", ["0", "101", "-5", "x", "2.0"])
def test_limit_rejected(raw: str) -> None:
    with pytest.raises(InvalidInput) as err:
        domain.validate_limit(raw)
    assert err.value.code == "invalid_limit"


def test_timeuuids_are_version_1_unique_and_time_ordered() -> None:
    ids = [domain.new_timeuuid() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    assert all(i.version == 1 for i in ids)
    keys = [domain.timeuuid_sort_key(i) for i in ids]
    assert [i.time for i in ids] == sorted(i.time for i in ids)
    assert keys == sorted(keys) or [i.time for i in ids] != sorted(i.time for i in ids)


def test_timeuuid_for_a_given_instant_round_trips() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    value = domain.new_timeuuid(when)
    assert value.version == 1
    assert abs(domain.timeuuid_time(value) - when) < timedelta(microseconds=1)
    assert domain.min_timeuuid(when).time == value.time


def test_parse_tweet_id_accepts_only_canonical_version_1() -> None:
    good = domain.new_timeuuid()
    assert domain.parse_tweet_id(str(good)) == good
    assert domain.parse_tweet_id(str(uuid.uuid4())) is None
    assert domain.parse_tweet_id(str(good).upper()) == good  # UUIDs are case-insensitive
    assert domain.parse_tweet_id("nope") is None
    assert domain.parse_tweet_id(str(good).replace("-", "")) is None


def test_rfc3339_is_utc_with_microseconds() -> None:
    when = datetime(2026, 11, 22, 10, 15, 30, 123456, tzinfo=UTC)
    assert domain.to_rfc3339(when) == "2026-11-22T10:15:30.123456Z"
    assert domain.parse_rfc3339("2026-11-22T10:15:30.123456Z") == when


def test_timeuuid_rfc3339_matches_the_datetime_path() -> None:
    from datetime import UTC, datetime, timedelta

    from fanline_shared.domain import new_timeuuid, timeuuid_rfc3339, timeuuid_time, to_rfc3339

    start = datetime(2026, 11, 26, 23, 59, 59, 999_999, tzinfo=UTC)
    moments = [start + timedelta(microseconds=n) for n in (0, 1, 2, 1_000_001)]
    moments += [datetime(1970, 1, 1, tzinfo=UTC), datetime(2000, 2, 29, 12, 0, 0, 500, tzinfo=UTC)]
    for moment in moments:
        tid = new_timeuuid(moment)
        assert timeuuid_rfc3339(tid) == to_rfc3339(timeuuid_time(tid))
    assert timeuuid_rfc3339(new_timeuuid(start)) == "2026-11-26T23:59:59.999999Z"
    now = new_timeuuid()
    assert timeuuid_rfc3339(now) == to_rfc3339(timeuuid_time(now))


def test_the_sort_key_is_time_then_clock_sequence_then_node_in_hex() -> None:
    """The key's definition (the SQLite adapters store it): computed from the
    integer, it must stay exactly this string for every UUID."""
    import random

    rng = random.Random(31)
    values = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(2000)]
    values += [domain.new_timeuuid() for _ in range(200)] + [uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)]
    for v in values:
        assert domain.timeuuid_sort_key(v) == f"{v.time:015x}{v.clock_seq:04x}{v.node:012x}"
