"""Start-up's topic check waits for the broker's metadata to show a topic's
partitions (``kafka_admin._partition_counts``): a topic another process has
just created can be described with some of them only (the embedded broker
after a restart, CI 2026-12-06), and a topic that really has fewer is still
refused."""

from __future__ import annotations

from typing import Any

import pytest

from fanline_shared import kafka_admin, policies


class FakeAdmin:
    """Describes ``events`` with the next count of ``seen`` (the last one
    once they run out), the other topics with 8 partitions."""

    def __init__(self, seen: list[int]) -> None:
        self.seen, self.calls = seen, 0

    async def describe_topics(self, topics: list[str]) -> list[dict[str, Any]]:
        n = self.seen[min(self.calls, len(self.seen) - 1)]
        self.calls += 1
        return [{"topic": t, "partitions": [{}] * (n if t == "events" else 8)} for t in topics]


async def test_a_topic_described_with_some_of_its_partitions_is_described_again() -> None:
    admin = FakeAdmin([0, 4, 4, 8])
    counts = await kafka_admin._partition_counts(admin, ["events", "dlq"], "events", 8)  # type: ignore[arg-type]
    assert counts == {"events": 8, "dlq": 8} and admin.calls == 4


async def test_a_topic_with_fewer_partitions_is_reported_after_the_settle_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policies, "TOPIC_METADATA_SETTLE_S", 0.3)
    admin = FakeAdmin([4])
    counts = await kafka_admin._partition_counts(admin, ["events", "dlq"], "events", 8)  # type: ignore[arg-type]
    assert counts["events"] == 4 and 2 <= admin.calls <= 5
