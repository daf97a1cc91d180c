"""The pure parts of `fanline sample-data` and the CLI's argument handling."""

from __future__ import annotations

import random

import pytest

from fanline_cli.__main__ import parser
from fanline_cli.sample_data import SampleDataError, follow_plan, sentence, usernames


def test_usernames_are_zero_padded_and_valid() -> None:
    assert usernames("s1a2_", 12)[:2] == ["s1a2_00", "s1a2_01"]
    assert usernames("x", 1) == ["x0"]
    with pytest.raises(SampleDataError, match="15 characters"):
        usernames("a_very_long_prefix_", 10)


@pytest.mark.parametrize(
    ("users", "per_user", "expected"),
    [(6, 2, 2), (3, 5, 2), (1, 3, 0), (10, 0, 0)],
    ids=["normal", "capped-at-others", "alone", "none"],
)
def test_follow_plan_is_distinct_others(users: int, per_user: int, expected: int) -> None:
    names = usernames("u", users)
    plan = follow_plan(names, per_user, random.Random(1))
    assert len(plan) == users * expected
    assert all(a != b for a, b in plan), "nobody follows themselves"
    assert len(set(plan)) == len(plan), "no edge twice"
    for name in names:
        assert sum(1 for a, _ in plan if a == name) == expected


def test_follow_plan_and_sentences_are_repeatable_with_a_seed() -> None:
    names = usernames("u", 20)
    assert follow_plan(names, 3, random.Random(7)) == follow_plan(names, 3, random.Random(7))
    assert sentence(random.Random(7)) == sentence(random.Random(7))
    assert all(0 < len(sentence(random.Random(i))) <= 280 for i in range(50))


@pytest.mark.parametrize(
    "argv",
    [
        ["sample-data", "--users", "0", "--follows-per-user", "1", "--tweets-per-user", "1"],
        ["dlq", "purge"],
        ["topics"],
        ["migrate", "--service", "api"],
    ],
)
def test_bad_arguments_are_rejected(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parser().parse_args(argv)
    assert exc.value.code == 2
