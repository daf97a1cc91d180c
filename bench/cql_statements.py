"""The statements ``python -m bench.cql_cost`` measures, and the measurement
itself (one process, one driver build: ``cql_cost`` chooses the build before
this module imports the driver)."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
import uuid
from collections.abc import Callable
from typing import Any

from cassandra.query import BatchStatement, BatchType

from deploy.local.infra import LocalInfra
from fanline_shared.cassandra import execute
from fanline_shared.cassandra.connection import prepare
from fanline_shared.cassandra.keyspace import Keyspace
from fanline_shared.domain import new_timeuuid
from fanline_shared.storage_service.schema import Migration

from .context import storage
from .probes import cpu_clocks

TABLES = [
    "CREATE TABLE IF NOT EXISTS {keyspace}.tweets (tweet_id timeuuid PRIMARY KEY, username text, body text)",
    "CREATE TABLE IF NOT EXISTS {keyspace}.userline (username_lc text, tweet_id timeuuid, "
    "PRIMARY KEY (username_lc, tweet_id)) WITH CLUSTERING ORDER BY (tweet_id DESC)",
    "CREATE TABLE IF NOT EXISTS {keyspace}.public_timeline (minute bigint, tweet_id timeuuid, "
    "PRIMARY KEY (minute, tweet_id)) WITH CLUSTERING ORDER BY (tweet_id DESC)",
    "CREATE TABLE IF NOT EXISTS {keyspace}.outbox (shard int, minute bigint, event_id timeuuid, key text, payload blob, "
    "PRIMARY KEY ((shard, minute), event_id))",
    "CREATE TABLE IF NOT EXISTS {keyspace}.tweet_counts (username_lc text PRIMARY KEY, tweets counter)",
    "CREATE TABLE IF NOT EXISTS {keyspace}.home_timeline (owner_lc text, tweet_id timeuuid, author_lc text, "
    "PRIMARY KEY (owner_lc, tweet_id)) WITH CLUSTERING ORDER BY (tweet_id DESC)",
]
BODY = "a tweet of the bench, about as long as the mixed scenario's"
PAYLOAD = b"x" * 300  # about a TweetCreated event


class Statements:
    """The prepared statements and a factory of ``(statement, params)`` per kind."""

    def __init__(self, session: Any, ks: str) -> None:
        p = prepare
        self.tweet = p(session, f"INSERT INTO {ks}.tweets (tweet_id, username, body) VALUES (?, ?, ?)", write=True)
        self.userline = p(session, f"INSERT INTO {ks}.userline (username_lc, tweet_id) VALUES (?, ?)", write=True)
        self.public = p(session, f"INSERT INTO {ks}.public_timeline (minute, tweet_id) VALUES (?, ?)", write=True)
        self.outbox = p(
            session, f"INSERT INTO {ks}.outbox (shard, minute, event_id, key, payload) VALUES (?, ?, ?, ?, ?)", write=True
        )
        self.count = p(session, f"UPDATE {ks}.tweet_counts SET tweets = tweets + ? WHERE username_lc = ?", write=True)
        self.home = p(
            session,
            f"INSERT INTO {ks}.home_timeline (owner_lc, tweet_id, author_lc) VALUES (?, ?, ?) USING TTL 86400",
            write=True,
        )
        self.get = p(session, f"SELECT tweet_id, username, body FROM {ks}.tweets WHERE tweet_id = ?")
        self.slice = p(session, f"SELECT tweet_id FROM {ks}.home_timeline WHERE owner_lc = ? LIMIT 20")
        self.ids: list[uuid.UUID] = []
        self.n = 0

    def _post_rows(self, logged: bool) -> BatchStatement:
        tweet_id, minute = new_timeuuid(), int(time.time() // 60)
        batch = BatchStatement(batch_type=BatchType.LOGGED if logged else BatchType.UNLOGGED)
        batch.consistency_level = self.tweet.consistency_level
        batch.add(self.tweet, (tweet_id, "author", BODY))
        batch.add(self.userline, ("author", tweet_id))
        batch.add(self.public, (minute, tweet_id))
        batch.add(self.outbox, (tweet_id.int % 8, minute, tweet_id, "author", PAYLOAD))
        return batch

    def kinds(self) -> dict[str, Callable[[], tuple[Any, Any]]]:
        def nth() -> int:
            self.n += 1
            return self.n

        return {
            "post rows, logged batch of 4": lambda: (self._post_rows(True), None),
            "post rows, unlogged batch of 4": lambda: (self._post_rows(False), None),
            "one insert (a tweet row)": lambda: (self.tweet, (new_timeuuid(), "author", BODY)),
            "counter update": lambda: (self.count, (1, "author")),
            "one home-timeline row": lambda: (self.home, (f"reader{nth() % 50}", new_timeuuid(), "author")),
            "tweet by id": lambda: (self.get, (self.ids[nth() % len(self.ids)],)),
            "home slice of 20": lambda: (self.slice, (f"reader{nth() % 50}",)),
        }


async def run_kind(session: Any, make: Callable[[], tuple[Any, Any]], rate: float, seconds: float) -> tuple[int, float]:
    """Send ``rate``/s of one kind for ``seconds``, open loop; (statements, elapsed s).
    ``rate`` 0: one after another, each awaited, for ``seconds`` (no pacing, warm loop)."""
    started = time.monotonic()
    if rate <= 0:
        n = 0
        while time.monotonic() - started < seconds:
            statement, params = make()
            await execute(session, statement, params, name="bench_cql_cost")
            n += 1
        return n, time.monotonic() - started
    n = int(rate * seconds)
    tasks = []
    for k in range(n):
        delay = started + k / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        statement, params = make()
        tasks.append(asyncio.ensure_future(execute(session, statement, params, name="bench_cql_cost")))
    await asyncio.gather(*tasks)
    return n, time.monotonic() - started


async def measure(rate: float, seconds: float, rounds: int, label: str = "") -> None:
    """Each kind alone, ``rounds`` times; one line per kind (``label``: the driver build)."""
    # The local engines' settings (FANLINE_CASSANDRA_* from the environment), a keyspace of its own.
    settings = storage({**os.environ, "FANLINE_KEYSPACE_PREFIX": f"cqlcost_{secrets.token_hex(3)}"})
    keyspace = Keyspace(settings, "owner", [Migration(1, "\n".join(t + ";" for t in TABLES))])
    await keyspace.start()
    pid = LocalInfra().cassandra.pid()
    if pid is None:
        raise SystemExit("no local Cassandra (make infra-up)")
    session = keyspace.session
    try:
        st = await asyncio.to_thread(Statements, session, keyspace.name)
        kinds = st.kinds()
        # Rows to read: a few thousand tweets, 50 home timelines of 100 rows.
        for make in (kinds["one insert (a tweet row)"], kinds["one home-timeline row"]):
            for _ in range(25):
                await asyncio.gather(*(execute(session, *make(), name="bench_cql_cost") for _ in range(200)))
        st.ids = [r.tweet_id for r in await execute(session, f"SELECT tweet_id FROM {keyspace.name}.tweets LIMIT 2000", name="t")]
        for make in kinds.values():  # warm-up: the JIT and the driver's paths
            await run_kind(session, make, rate, 3.0)
        pace = f"at {rate:g}/s" if rate > 0 else "one after another"
        print(f"Cassandra and client CPU per statement, each kind alone {pace} for {seconds:g} s ({rounds} rounds){label}")
        for round_no in range(1, rounds + 1):
            before = cpu_clocks({"cassandra": pid})["cassandra"]
            await asyncio.sleep(seconds)
            idle = (cpu_clocks({"cassandra": pid})["cassandra"] - before) / seconds
            print(f"round {round_no}: Cassandra idle {idle * 100:.2f} % of a core")
            for name, make in kinds.items():
                cass0, client0 = cpu_clocks({"cassandra": pid})["cassandra"], time.process_time()
                n, elapsed = await run_kind(session, make, rate, seconds)
                cass = cpu_clocks({"cassandra": pid})["cassandra"] - cass0 - idle * elapsed
                client = time.process_time() - client0
                print(f"  {name:32s} Cassandra {cass / n * 1e6:5.0f} µs   client {client / n * 1e6:4.0f} µs")
    finally:
        await execute(session, f"DROP KEYSPACE IF EXISTS {keyspace.name}", name="bench_drop")
        await keyspace.close()
