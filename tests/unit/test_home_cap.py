"""The cap's sampling and background trimming (home_cap.py), with a fake repository."""

from __future__ import annotations

import asyncio
import uuid

from fanline_shared.domain import new_timeuuid
from fanline_tweet_store.home_cap import HomeCap


class FakeHome:
    def __init__(self) -> None:
        self.trimmed: list[tuple[str, int]] = []

    async def trim(self, owner: str, keep: int) -> uuid.UUID | None:
        self.trimmed.append((owner, keep))
        return None


def test_sampling_is_about_one_in_an_eighth_of_the_cap_and_deterministic() -> None:
    cap = HomeCap(FakeHome(), 800)  # type: ignore[arg-type]
    assert cap.sample_every == 100
    owners = [f"user{n}" for n in range(20_000)]
    tweet = new_timeuuid()
    sampled = cap.sampled(owners, tweet)
    assert 100 <= len(sampled) <= 300  # expected 200
    assert cap.sampled(owners, tweet) == sampled  # a redelivered page samples the same owners
    assert cap.sampled(owners, new_timeuuid()) != sampled


def test_a_small_cap_trims_on_every_write() -> None:
    cap = HomeCap(FakeHome(), 10)  # type: ignore[arg-type]
    assert cap.sampled(["a", "b"], new_timeuuid()) == ["a", "b"]


async def test_background_trims_deduplicate_owners_and_bound_the_queue() -> None:
    home = FakeHome()
    cap = HomeCap(home, 10, queue_size=3)  # type: ignore[arg-type]
    cap.wrote(["A", "a", "b"], new_timeuuid())
    cap.schedule(["c", "d", "e"])  # d and e do not fit
    cap.start()
    for _ in range(50):
        if len(home.trimmed) == 3:
            break
        await asyncio.sleep(0.01)
    await cap.stop()
    assert sorted(home.trimmed) == [("a", 10), ("b", 10), ("c", 10)]
