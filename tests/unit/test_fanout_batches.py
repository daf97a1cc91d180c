"""The worker's batches: one lane per event key, in order; lanes concurrent."""

from __future__ import annotations

import asyncio

import pytest

from fanline_fanout.app import process_batch
from fanline_fanout.config import Settings
from fanline_shared.config import ConfigError


async def test_same_key_in_order_different_keys_concurrently() -> None:
    started: list[str] = []
    finished: list[str] = []
    gate = asyncio.Event()

    async def process(item: tuple[str, int]) -> None:
        name = f"{item[0]}{item[1]}"
        started.append(name)
        if item == ("a", 1):
            await gate.wait()  # a1 is slow: a2 must wait for it, b1 must not
        finished.append(name)
        if name == "b1":
            gate.set()

    batch = [("a", 1), ("b", 1), ("a", 2), ("c", 1)]
    await asyncio.wait_for(process_batch(batch, lambda item: item[0], process), 1)
    assert started.index("b1") < finished.index("a1")  # b did not wait for a
    assert finished.index("a1") < started.index("a2")  # a2 only after a1
    assert sorted(finished) == ["a1", "a2", "b1", "c1"]


async def test_an_empty_batch_does_nothing() -> None:
    async def process(item: object) -> None:
        raise AssertionError("nothing to process")

    await process_batch([], lambda item: item, process)


def test_batch_wait_must_be_positive() -> None:
    with pytest.raises(ConfigError):
        Settings.from_env({"FANLINE_FANOUT_BATCH_WAIT_S": "0"})
    assert Settings.from_env({}).batch_size == 16
