"""What one outbox sweep of the relay costs at steady state, with and without
the re-check of empty old partitions (``FANLINE_OUTBOX_RECHECK_S``, issue 31).

A focused measurement beside the scenarios: the ``mixed`` run lasts minutes on
fresh keyspaces, so its outboxes never hold the ten open minutes a running
system sweeps. This fills one outbox as 60 requests/s leave it (posts at 12/s:
90 events per shard and minute, ten minutes, every event acknowledged, so the
partitions hold tombstones), then times ``pending`` back to back: the client's
CPU (this process) and Cassandra's (``/proc``), per sweep, in turns of
re-check 0 (every open partition on every sweep) and 30 s.

    python -m bench.outbox_sweep        # single-node engines (make infra-up)

It prints each turn's figures and what they come to per 1,000 requests at
60/s: two owners' outboxes (social-graph's holds fewer events per partition,
taken here as the same: a sweep's cost is mostly per statement), one sweep
every ``FANLINE_RELAY_READ_S`` (3 s) each. The re-check's own re-reads (each
cold partition once per 30 s) are left out: about a tenth of the saving.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from datetime import UTC, datetime, timedelta

from deploy.local.infra import LocalInfra
from fanline_shared.cassandra import execute, execute_concurrent
from fanline_shared.cassandra.keyspace import Keyspace
from fanline_shared.cassandra.outbox import OUTBOX_SHARDS, outbox_partition
from fanline_shared.domain import OutboxEvent, new_timeuuid

from .context import storage
from .probes import cpu_clocks

PER_SHARD_MINUTE = 90
MINUTES = 10
SWEEPS = 60
RATE = 60.0
OUTBOXES = 2
READ_EVERY_S = 3.0


async def measure() -> None:
    # The local engines' settings (FANLINE_CASSANDRA_* from the environment), a keyspace of its own.
    settings = storage({**os.environ, "FANLINE_KEYSPACE_PREFIX": f"sweep_{secrets.token_hex(3)}"})
    keyspace = Keyspace(settings, "owner", [])
    box = keyspace.outbox()
    await keyspace.start()
    pid = LocalInfra().cassandra.pid()
    if pid is None:
        raise SystemExit("no local Cassandra (make infra-up)")
    cassandra = {"cassandra": pid}
    try:
        start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=MINUTES - 1)
        per_minute = PER_SHARD_MINUTE * OUTBOX_SHARDS
        events = [
            OutboxEvent(id=new_timeuuid(start + timedelta(minutes=m, seconds=59.0 * i / per_minute)), key="k", payload=b"{}")
            for m in range(MINUTES)
            for i in range(per_minute)
        ]
        first_of = {outbox_partition(e.id): e for e in reversed(events)}
        await asyncio.gather(*(box.ensure_index(e) for e in first_of.values()))
        statement = box.row_write(events[0])[0]
        rows = [box.row_write(e)[1] for e in events]
        await execute_concurrent(keyspace.session, statement, rows, name="sweep_rows", concurrency=64)
        await box.ack([e.id for e in events])
        print(f"{len(events)} events written and acknowledged in {len(first_of)} partitions")
        for recheck in (0.0, 30.0, 0.0, 30.0):
            box.recheck_empty_s = recheck
            await box.pending(datetime.now(UTC) - timedelta(seconds=3), 1000)  # the first sweep reads them all
            c0, p0, t0 = cpu_clocks(cassandra)["cassandra"], time.process_time(), time.monotonic()
            for _ in range(SWEEPS):
                found = await box.pending(datetime.now(UTC) - timedelta(seconds=3), 1000)
                assert not found, found
            c1, p1, t1 = cpu_clocks(cassandra)["cassandra"], time.process_time(), time.monotonic()
            engine_ms, client_ms = (c1 - c0) / SWEEPS * 1e3, (p1 - p0) / SWEEPS * 1e3
            per_1k = (engine_ms + client_ms) / 1e3 * (OUTBOXES / READ_EVERY_S) / RATE * 1e3
            print(
                f"re-check {recheck:2.0f} s: per sweep Cassandra {engine_ms:5.1f} CPU-ms, client {client_ms:5.1f} CPU-ms,"
                f" {(t1 - t0) / SWEEPS * 1e3:5.1f} ms; {per_1k:.3f} CPU-s per 1,000 requests at {RATE:.0f}/s"
            )
    finally:
        await execute(keyspace.session, f"DROP KEYSPACE IF EXISTS {keyspace.name}", name="sweep_drop")
        await keyspace.close()


if __name__ == "__main__":
    asyncio.run(measure())
