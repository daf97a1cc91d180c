"""A producer dropped after a failed send is discarded, not flushed
(kafka.py ``_discard``): aiokafka's ``stop()`` would wait for the broker and
then deliver sends the gateway already reported as failed, beside the relay's
copy (tests/e2e/test_relay_leader.py measures it on real Kafka)."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer

from fanline_shared import kafka


async def test_discard_stops_the_sender_without_flushing_and_a_later_stop_is_a_no_op() -> None:
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1")  # never started: nothing to connect to
    flushed: list[bool] = []

    async def flush() -> None:  # what stop() would wait for
        flushed.append(True)
        await asyncio.Event().wait()

    producer._message_accumulator.close = flush  # type: ignore[method-assign]
    await asyncio.wait_for(kafka._discard(producer, 1.0), 5)
    assert producer._closed
    await asyncio.wait_for(producer.stop(), 1)  # returns at once: already closed, no flush
    assert flushed == []
