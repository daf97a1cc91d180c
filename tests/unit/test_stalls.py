"""A stalled event loop is measured and the code holding it is named (stalls.py)."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time

import pytest
from prometheus_client import REGISTRY

from fanline_shared import stalls

FAST = stalls.LoopWatch(interval_s=0.02, report_s=0.1, check_s=0.02)


def _lag(stat: str) -> float:
    return REGISTRY.get_sample_value(f"fanline_event_loop_lag_seconds_{stat}") or 0.0


def hold_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # synchronous work on the loop's thread, as a long parse or a full GC would be


def test_a_blocked_loop_is_reported_once_with_the_code_that_holds_it(caplog: pytest.LogCaptureFixture) -> None:
    before_count, before_sum = _lag("count"), _lag("sum")

    async def main() -> None:
        stalls.watch(policy=FAST)
        await asyncio.sleep(0.1)  # a few beats on time
        hold_the_loop(0.4)
        await asyncio.sleep(0.1)

    with caplog.at_level(logging.WARNING, logger="fanline_shared.stalls"):
        asyncio.run(main())
    reports = [r.getMessage() for r in caplog.records if "event loop blocked" in r.getMessage()]
    assert len(reports) == 1, reports
    assert "hold_the_loop" in reports[0] and "time.sleep" in reports[0]
    assert _lag("count") - before_count >= 5
    assert _lag("sum") - before_sum >= 0.3  # the late beat's lateness


def test_an_idle_loop_reports_nothing_and_the_watchdog_ends_with_its_loop(caplog: pytest.LogCaptureFixture) -> None:
    patient = stalls.LoopWatch(interval_s=0.02, report_s=1.0, check_s=0.02)  # a loaded CI machine can be 100 ms late

    async def main() -> None:
        stalls.watch(policy=patient)
        stalls.watch(policy=patient)  # once per loop
        await asyncio.sleep(0.3)

    with caplog.at_level(logging.WARNING, logger="fanline_shared.stalls"):
        asyncio.run(main())
    assert not [r for r in caplog.records if "event loop blocked" in r.getMessage()]
    time.sleep(FAST.check_s * 5)
    assert not [t for t in threading.enumerate() if t.name == "fanline-loop-watchdog"]


def test_older_generations_collections_are_timed() -> None:
    async def main() -> None:
        stalls.watch(policy=FAST)

    asyncio.run(main())
    before = REGISTRY.get_sample_value("fanline_gc_pause_seconds_count", {"generation": "2"}) or 0.0
    gc.collect(2)
    gc.collect(0)  # the youngest generation is not timed
    assert REGISTRY.get_sample_value("fanline_gc_pause_seconds_count", {"generation": "2"}) == before + 1
    assert REGISTRY.get_sample_value("fanline_gc_pause_seconds_count", {"generation": "0"}) is None
