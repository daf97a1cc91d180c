"""The worker's consumer commits only offsets the pipeline finished
(``fanline_fanout.offsets``): faust's acks of skipped messages and its
fetch gaps never move a commit past an event nobody processed.

Each case runs on faust's own consumer too: there it commits past the
unprocessed offsets (the hazard), here it stops in front of them. The
consumer is the real class of a worker's app, never started (no broker):
only its offset bookkeeping runs.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest
import structlog.testing
from faust.transport.drivers.aiokafka import Consumer
from faust.types import TP
from faust.types.tuples import ConsumerMessage

from fanline_fanout.app import create_app
from fanline_fanout.config import Settings
from fanline_fanout.offsets import FinishedOnlyConsumer, JumpWatch, finished
from fanline_shared import metrics

COMMITTED = 100


@pytest.fixture(params=["fanline", "faust"])
def consumer(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Any]:
    env = {**os.environ, "FANLINE_INTERNAL_TOKEN": "t" * 32, "FANLINE_DATA_DIR": str(tmp_path)}
    app = create_app(Settings.from_env(env))
    if request.param == "fanline":
        c = app.consumer
    else:  # faust's own, created as App._new_consumer does, for the comparison
        c = Consumer(
            app.transport,
            callback=app.topics.on_message,
            on_partitions_revoked=app._on_partitions_revoked,
            on_partitions_assigned=app._on_partitions_assigned,
        )
    assert type(c) is (FinishedOnlyConsumer if request.param == "fanline" else Consumer)
    app.topics.acks_enabled_for = lambda topic: True  # the agents' topics once started
    c.kind = request.param
    yield c


TP0 = TP("fanline.events", 0)


def message(offset: int) -> ConsumerMessage:
    return ConsumerMessage(TP0.topic, TP0.partition, offset, 0.0, 0, [], b"author", b"{}", None, tp=TP0, generation_id=2)


def done(consumer: Any, offset: int) -> None:
    """What the pipeline does once the event at ``offset`` and all before it are done."""
    m = message(offset)
    finished(m)
    m.ack(consumer)


def not_committed(reason: str) -> float:
    return metrics.OFFSETS_NOT_COMMITTED.labels(reason)._value.get()


def test_messages_faust_skipped_and_acked_are_not_committed_past(consumer: Any) -> None:
    """After a rebalance the stream skips (and acks) messages fetched in the
    earlier generation: 105-109 here, never processed. The pipeline then
    finishes 100-104 of the new generation: the commit may reach 105, no
    further, until the pipeline finishes 105-109 themselves."""
    consumer._committed_offset[TP0] = COMMITTED
    before = not_committed("unfinished")
    for offset in range(105, 110):
        message(offset).ack(consumer)  # Stream._py_aiter's ack of a skipped message
    for offset in range(100, 105):
        done(consumer, offset)
    if consumer.kind == "faust":
        assert consumer._new_offset(TP0) == 110  # past five events nobody processed
        return
    assert consumer._new_offset(TP0) == 105
    consumer._committed_offset[TP0] = 105  # as the commit of 105 does
    assert not_committed("unfinished") == before + 5
    for offset in range(105, 110):
        done(consumer, offset)  # redelivered in the new generation and finished
    assert consumer._new_offset(TP0) == 110


@pytest.mark.parametrize(("log_start", "committable"), [(0, 101), (104, 104)])
def test_a_fetch_gap_counts_as_done_only_where_retention_deleted_it(consumer: Any, log_start: int, committable: int) -> None:
    """A fetch jumps from 100 to 106 (faust's read offset ran ahead of a
    seek: 101-105 were dropped, not processed). Only offsets below the log
    start (deleted by retention) may count as done."""
    consumer._committed_offset[TP0] = COMMITTED

    async def earliest_offsets(*tps: TP) -> dict[TP, int]:
        return {tp: log_start for tp in tps}

    consumer.earliest_offsets = earliest_offsets
    before = not_committed("gap")
    done(consumer, 100)
    asyncio.run(consumer._add_gap(TP0, 101, 106))  # Consumer._drain_messages on the jump
    done(consumer, 106)
    if consumer.kind == "faust":
        assert consumer._new_offset(TP0) == 107  # past 101-105
        return
    assert consumer._new_offset(TP0) == committable
    assert not_committed("gap") == before + (106 - max(101, log_start))


def test_a_hole_in_one_generation_is_logged_and_a_new_generation_is_not() -> None:
    """Offsets delivered 100, 101, 105 in one generation: 102-104 never
    reached the stream. A new generation starting lower is a redelivery."""
    watch = JumpWatch()
    with structlog.testing.capture_logs() as logged:
        for offset, generation in ((100, 2), (101, 2), (105, 2), (90, 3), (91, 3)):
            m = message(offset)
            m.generation_id = generation
            watch.saw(m)
    jumps = [e for e in logged if e["event"] == "offsets.jump"]
    assert [(e["first"], e["last"], e["generation"]) for e in jumps] == [(102, 104, 2)]


@pytest.mark.parametrize("fetch", [{}, {"FANLINE_WORKER_FETCH_MIN_BYTES": "1", "FANLINE_WORKER_FETCH_MAX_WAIT_MS": "1500"}])
async def test_the_worker_consumer_fetches_with_the_configured_minimum_and_wait(fetch: dict[str, str], tmp_path: Any) -> None:
    """``BatchedFetchThread`` hands the settings to the aiokafka consumer faust
    creates (its private fields: this fails if aiokafka renames them); unset,
    they are 64 KiB and 100 ms (faust's own: 1 byte, 1,500 ms)."""
    env = {**os.environ, "FANLINE_INTERNAL_TOKEN": "t" * 32, "FANLINE_DATA_DIR": str(tmp_path), **fetch}
    app = create_app(Settings.from_env(env))
    thread = app.consumer._new_consumer_thread()
    assert type(thread).__name__ == "BatchedFetchThread"
    kafka_consumer = thread._create_worker_consumer(app.transport)
    try:
        wanted = (
            int(fetch.get("FANLINE_WORKER_FETCH_MIN_BYTES", 65536)),
            int(fetch.get("FANLINE_WORKER_FETCH_MAX_WAIT_MS", 100)),
        )
        assert (kafka_consumer._fetch_min_bytes, kafka_consumer._fetch_max_wait_ms) == wanted
    finally:
        await kafka_consumer._client.close()
