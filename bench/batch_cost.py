"""What building a fan-out page's batches costs the client: the driver's ``bind`` per row
(``cassandra.replica_batches``) against one tweet's values serialized once
(``cassandra.keyed_batches``, what tweet-store runs), the same rows through the services' bridge,
in alternating rounds on the single-node engines (``make infra-up``), on a keyspace of its own;
``calls`` sends the keyed batches with one ``execute`` each from ``--window`` tasks, as tweet-store's
adaptive limit does, where the others hand the whole page to ``execute_each``.

Each round writes ``--pages`` pages of 1,000 owners (one new tweet each) as unlogged batches of 10,
``--window`` (64) in flight, and prints rows/s, this process's CPU per row (the whole client: building, the
driver's send and receive, the bridge) and Cassandra's (``/proc``).

    python -m bench.batch_cost               # 4 pairs of 150 pages
    python -m bench.batch_cost --pages 300 --rounds 6
    python -m bench.batch_cost --kinds keyed,calls
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from typing import Any

from fanline_shared.driver_sources import prefer_sources

OWNERS, BATCH_ROWS = 1000, 10
TABLE = (
    "CREATE TABLE IF NOT EXISTS {keyspace}.home_timeline (owner_lc text, tweet_id timeuuid, author_lc text, "
    "PRIMARY KEY (owner_lc, tweet_id)) WITH CLUSTERING ORDER BY (tweet_id DESC);"
)


async def measure(pages: int, rounds: int, kinds: list[str], window: int) -> None:
    from deploy.local.infra import LocalInfra
    from fanline_shared import cassandra as cql
    from fanline_shared.cassandra.keyspace import Keyspace
    from fanline_shared.storage_service.schema import Migration

    from . import probes
    from .context import storage

    ks = Keyspace(storage(dict(os.environ)), "batch_cost", [Migration(1, TABLE)])
    await ks.start()
    s = ks.session
    text = f"INSERT INTO {ks.name}.home_timeline (owner_lc, tweet_id, author_lc) VALUES (?, ?, ?) USING TTL ?"
    st = await asyncio.to_thread(cql.prepare, s, text, write=True)
    if (pid := LocalInfra().cassandra.pid()) is None:
        raise SystemExit("no local Cassandra (make infra-up)")
    node = {"cassandra": pid}
    owners = [f"user{i:05d}" for i in range(OWNERS)]

    async def calls(batches: list[Any]) -> None:
        """One ``execute`` per batch from ``window`` tasks: how tweet-store's adaptive limit
        sends a page (``limiter.write_all``), without the limit's own bookkeeping."""
        todo = iter(batches)

        async def worker() -> None:
            for b in todo:
                await cql.execute(s, b, name="batch_cost")

        await asyncio.gather(*(worker() for _ in range(window)))

    async def run(kind: str) -> tuple[float, float, float]:
        c0, p0, t0 = probes.cpu_clocks(node)["cassandra"], time.process_time(), time.perf_counter()
        for _ in range(pages):
            tid = uuid.uuid1()
            if kind == "bind":
                batches = cql.replica_batches(s, st, [(o, tid, "author", 3600) for o in owners], rows=BATCH_ROWS)
            else:
                batches = cql.keyed_batches(s, st, owners, (tid, "author", 3600), rows=BATCH_ROWS)
            if kind == "calls":
                await calls(batches)
            else:
                await cql.execute_each(s, batches, name="batch_cost", concurrency=window)
        rows = pages * OWNERS
        wall, cpu, node_cpu = time.perf_counter() - t0, time.process_time() - p0, probes.cpu_clocks(node)["cassandra"] - c0
        return rows / wall, cpu / rows * 1e6, node_cpu / rows * 1e6

    try:
        for kind in kinds:  # warm-up: connections, the table's first flush
            await run(kind)
        for r in range(rounds):
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                rate, client, node_us = await run(kind)
                line = f"{rate:8,.0f} rows/s  client {client:5.2f} µs/row  cassandra {node_us:5.2f} µs/row"
                print(f"round {r + 1} {kind:>5}: {line}", flush=True)
    finally:
        await cql.execute(s, f"DROP KEYSPACE IF EXISTS {ks.name}", name="batch_cost_drop")
        await ks.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--window", type=int, default=64, help="batches in flight (default 64)")
    parser.add_argument("--kinds", default="bind,keyed", help="of bind, keyed, calls (keyed, one execute per batch)")
    args = parser.parse_args()
    if not (kinds := args.kinds.split(",")) or set(kinds) - {"bind", "keyed", "calls"}:
        parser.error("--kinds: a comma-separated list of bind, keyed, calls")
    prefer_sources()  # the driver's build the storage services run
    asyncio.run(measure(args.pages, args.rounds, kinds, args.window))


if __name__ == "__main__":
    main()
