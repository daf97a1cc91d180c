"""bench/quiesce.py: the open-loop phases start once Cassandra's compactions
have settled (a saturation curve measured under them finds less capacity)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import quiesce


def fake_node(monkeypatch: pytest.MonkeyPatch, tasks: list[tuple[int, int]]) -> list[str]:
    """The node answers (active, pending) from ``tasks`` in turn, then idle."""
    asked: list[str] = []

    async def execute(session: Any, query: str, params: Any = None, *, name: str) -> list[Any]:
        asked.append(query)
        active, pending = tasks.pop(0) if tasks else (0, 0)
        return [SimpleNamespace(active_tasks=active, pending_tasks=pending)]

    monkeypatch.setattr(quiesce.cql, "execute", execute)
    return asked


def test_waits_until_no_compaction_runs_for_several_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_node(monkeypatch, [(2, 5), (1, 0), (0, 0), (1, 0)])  # a flush starts one more
    out = asyncio.run(quiesce.settle_compactions(object(), "t", interval_s=0, quiet_polls=3))
    assert out["tasks_at_start"] == 7 and out["settled"] is True
    assert len(asked) == 7  # 4 busy-or-quiet answers, then 3 quiet in a row
    assert "system_views.thread_pools" in asked[0] and "CompactionExecutor" in asked[0]


def test_gives_up_after_the_timeout_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_node(monkeypatch, [(1, 3)] * 10_000)
    out = asyncio.run(quiesce.settle_compactions(object(), "t", timeout_s=0.05, interval_s=0.01))
    assert out["settled"] is False and out["tasks_at_start"] == 4


def test_the_page_says_how_long_each_open_loop_phase_waited() -> None:
    from bench import report

    from .test_bench_report import fake_result

    doc = fake_result()
    doc["details"]["compactions_settled"] = {
        "mixed": {"tasks_at_start": 3, "waited_s": 42.0, "settled": True},
        "saturation": {"tasks_at_start": 1, "waited_s": 600.0, "settled": False},
    }
    md = report.render_markdown(doc)
    section = md[md.index("## 9. Open-loop") :]
    assert "mixed waited 42 s (3 at first)" in section
    assert "saturation waited 600 s (1 at first, **still compacting** at the timeout)" in section
