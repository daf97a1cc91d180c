"""Contract of ``UserRepository`` (social-graph), run against every adapter."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from fanline_shared.domain import User, utcnow
from fanline_shared.errors import Conflict
from fanline_social_graph.accounts import candidate_id
from fanline_social_graph.adapters import SocialGraphStorage

from .support import Names


def ms(value: datetime) -> datetime:
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


async def test_create_then_get_keeps_display_case(social_graph: SocialGraphStorage, names: Names) -> None:
    name = names.user("Ab")
    created_at = datetime(2026, 3, 4, 5, 6, 7, 891234, tzinfo=UTC)
    user = await social_graph.users.create(name, "hash-1", created_at)
    # Every user gets an account id (Mastodon-compatible API, accounts.py).
    account_id = candidate_id(ms(created_at), name.lower())
    assert user == User(username=name, created_at=ms(created_at), account_id=account_id)
    for lookup in (name, name.lower(), name.upper()):
        assert await social_graph.users.get(lookup) == user, lookup


async def test_get_unknown_is_none(social_graph: SocialGraphStorage, names: Names) -> None:
    assert await social_graph.users.get(names.user()) is None
    assert await social_graph.users.credentials(names.user()) is None


@pytest.mark.parametrize(
    "second",
    [
        pytest.param(lambda n: n, id="same-case"),
        pytest.param(str.upper, id="upper-case"),
        pytest.param(str.lower, id="lower-case"),
        pytest.param(str.swapcase, id="swapped-case"),
    ],
)
async def test_names_are_unique_case_insensitively(social_graph: SocialGraphStorage, names: Names, second) -> None:
    name = names.user("Mx")
    first = await social_graph.users.create(name, "hash-first", utcnow())
    with pytest.raises(Conflict) as info:
        await social_graph.users.create(second(name), "hash-second", utcnow())
    assert info.value.code == "username_taken"
    assert await social_graph.users.get(name) == first
    found = await social_graph.users.credentials(name)
    assert found is not None and found[1] == "hash-first"


async def test_concurrent_creates_of_one_name_exactly_one_wins(social_graph: SocialGraphStorage, names: Names) -> None:
    base = names.user("Race")
    variants = [base.upper(), base.lower(), base, base.swapcase()] * 2
    results = await asyncio.gather(
        *(social_graph.users.create(v, f"hash-{i}", utcnow()) for i, v in enumerate(variants)),
        return_exceptions=True,
    )
    winners = [r for r in results if isinstance(r, User)]
    losers = [r for r in results if isinstance(r, Conflict)]
    assert len(winners) == 1, results
    assert len(losers) == 7, results
    assert all(r.code == "username_taken" for r in losers)
    stored = await social_graph.users.get(base)
    assert stored == winners[0]
    winner_index = results.index(winners[0])
    creds = await social_graph.users.credentials(base)
    assert creds is not None and creds[1] == f"hash-{winner_index}"


async def test_credentials_return_user_and_hash(social_graph: SocialGraphStorage, names: Names) -> None:
    name = names.user("Cr")
    user = await social_graph.users.create(name, "$argon2id$v=19$m=8,t=1,p=1$c2FsdA$aGFzaA", utcnow())
    assert await social_graph.users.credentials(name.upper()) == (user, "$argon2id$v=19$m=8,t=1,p=1$c2FsdA$aGFzaA")


async def test_get_many_by_canonical_name(social_graph: SocialGraphStorage, names: Names) -> None:
    a, b = names.user("Aa"), names.user("Bb")
    ua = await social_graph.users.create(a, "h", utcnow())
    ub = await social_graph.users.create(b, "h", utcnow())
    unknown = names.user("zz")
    found = await social_graph.users.get_many([a.upper(), b, unknown, a.lower()])
    assert found == {a.lower(): ua, b.lower(): ub}
    assert await social_graph.users.get_many([]) == {}
    assert await social_graph.users.get_many([unknown]) == {}


@pytest.mark.parametrize("known", [1, 2, 4, 9])
async def test_get_many_of_few_and_of_many_names(social_graph: SocialGraphStorage, names: Names, known: int) -> None:
    """A handful of names (a follow's pair: one query for them all in Cassandra) and more (one
    query each) give the same answer: every known name once, under its canonical name."""
    users = [await social_graph.users.create(names.user(f"M{i}"), "h", utcnow()) for i in range(known)]
    asked = [u.username.upper() for u in users] + [names.user("nobody")]
    assert await social_graph.users.get_many(asked) == {u.username.lower(): u for u in users}


SEARCH_SUFFIXES = ["", "0", "_", "a", "AB", "ab9", "b", "Bz", "z_z"]


@pytest.mark.parametrize(
    ("extra", "limit", "expected"),
    [
        pytest.param("", 100, ["", "0", "_", "a", "ab", "ab9", "b", "bz", "z_z"], id="whole-stem"),
        pytest.param("", 3, ["", "0", "_"], id="limited"),
        pytest.param("a", 100, ["a", "ab", "ab9"], id="longer-prefix"),
        pytest.param("ab", 100, ["ab", "ab9"], id="exact-and-longer"),
        pytest.param("B", 100, ["b", "bz"], id="upper-case-prefix"),
        pytest.param("q", 100, [], id="no-match"),
        pytest.param("ab9x", 100, [], id="longer-than-any"),
    ],
)
async def test_search_prefix(social_graph: SocialGraphStorage, names: Names, extra: str, limit: int, expected: list[str]) -> None:
    stem = names.stem(5)
    for suffix in SEARCH_SUFFIXES:
        await social_graph.users.create(stem.upper()[:2] + stem[2:] + suffix, "h", utcnow())
    found = await social_graph.users.search_prefix((stem + extra).lower(), limit)
    assert [u.username.lower() for u in found] == [stem + e for e in expected]
    # records keep the display case given at sign-up
    assert all(u.username.startswith(stem.upper()[:2]) for u in found)


async def test_search_one_character_prefix_spans_partitions(social_graph: SocialGraphStorage) -> None:
    # The only test that creates names starting with "_" (Names.user() starts
    # with a letter), so the result is exact even in a shared keyspace.
    created = ["_", "_0", "__", "_a", "_AB", "_ab1", "_Zed", "_z"]
    for name in created:
        await social_graph.users.create(name, "h", utcnow())
    found = await social_graph.users.search_prefix("_", 100)
    assert [u.username for u in found] == ["_", "_0", "__", "_a", "_AB", "_ab1", "_z", "_Zed"]
    limited = await social_graph.users.search_prefix("_", 3)
    assert [u.username for u in limited] == ["_", "_0", "__"]


async def test_search_empty_prefix_lists_names_in_order(social_graph: SocialGraphStorage, names: Names) -> None:
    for _ in range(5):
        await social_graph.users.create(names.user(), "h", utcnow())
    found = await social_graph.users.search_prefix("", 5)
    keys = [u.username.lower() for u in found]
    assert len(keys) == 5
    assert keys == sorted(keys) and len(set(keys)) == 5


@pytest.mark.parametrize("prefix", ["-", "a-", "é", "x" * 16], ids=["dash", "dash-2", "non-ascii", "too-long"])
async def test_search_prefix_outside_the_alphabet_finds_nothing(social_graph: SocialGraphStorage, prefix: str) -> None:
    assert await social_graph.users.search_prefix(prefix, 10) == []


async def test_created_at_round_trips_at_millisecond_precision(social_graph: SocialGraphStorage, names: Names) -> None:
    name = names.user()
    when = utcnow() - timedelta(days=3)
    user = await social_graph.users.create(name, "h", when)
    stored = await social_graph.users.get(name)
    assert stored is not None and stored.created_at == user.created_at == ms(when)
    assert stored.created_at.tzinfo is not None and stored.created_at.utcoffset() == timedelta(0)
