"""The relay sends acknowledgements every interval but reads the outboxes
only every ``read_every_s`` (issue 31: each read is 16+ statements at each
owner and nearly always finds nothing), and soon after this gateway's own
fast path failed. Fakes for the owners (tests/unit/test_outbox_relay_lease.py)."""

from __future__ import annotations

import asyncio

from fanline_shared.outbox import OutboxRelay

from .test_outbox_relay_lease import Broker, Owner, waiting


class Counting(Owner):
    def __init__(self) -> None:
        super().__init__([], leases=False)
        self.reads = 0
        self.acks = 0

    async def call(self, method: str, path: str, **kw: object) -> object:
        self.reads += path == "/internal/outbox"
        self.acks += path == "/internal/outbox/ack"
        return await super().call(method, path, **kw)  # type: ignore[arg-type]


async def test_acks_go_every_interval_but_reads_only_every_read_period() -> None:
    owner = Counting()
    relay = OutboxRelay(Broker(), {"tweet-store": owner}, sweep_interval_s=0.05, read_every_s=0.5)  # type: ignore[dict-item]
    relay.start()
    try:
        for event in waiting(12):
            relay.published("tweet-store", event.id)
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.1)
    finally:
        await relay.stop()
    assert owner.acks >= 8  # about one per interval that had acks
    assert 1 <= owner.reads <= 3  # at start, then every 0.5 s of the ~0.75 s


async def test_read_every_defaults_to_three_intervals() -> None:
    owner = Counting()
    relay = OutboxRelay(Broker(), {"tweet-store": owner}, sweep_interval_s=0.1)  # type: ignore[dict-item]
    relay.start()
    await asyncio.sleep(0.95)
    await relay.stop()
    assert 3 <= owner.reads <= 4  # at 0, 0.3, 0.6 and 0.9 s: not at each of the 9 turns


async def test_a_failed_fast_path_brings_the_next_read_forward() -> None:
    """A stale event this gateway could not publish is swept about
    ``stale_after_ms`` after the failure, not at the next regular read."""
    owner = Counting()
    broker = Broker()
    relay = OutboxRelay(broker, {"tweet-store": owner}, sweep_interval_s=0.05, stale_after_ms=200, read_every_s=60)  # type: ignore[dict-item]
    relay.start()
    try:
        await asyncio.sleep(0.1)  # the first read, at start
        reads = owner.reads
        (event,) = waiting(1)
        owner.rows[event.id] = event  # stored by the owner; the broker refused the fast path
        relay.read_soon()
        await asyncio.sleep(0.1)
        assert owner.reads == reads  # not stale yet
        await asyncio.sleep(0.3)
        assert owner.reads == reads + 1 and broker.sent == [event.id]
    finally:
        await relay.stop()
