"""The standard mix done by the leanest Python we could write on the same driver and broker
client: the floor under ``cost_fanline`` (issue 31, scenario ``cost_floor``,
docs/benchmark-methods.md).

Two processes, as Fanline's colocated layout has: a *gateway* (a bare uvloop protocol
parsing HTTP/1.1 by hand, no framework, no middleware, no metrics, no logging) that runs
each route's Cassandra statements through the services' own bridge and connection settings
(``fanline_shared.cassandra``) and publishes an event per post, follow and unfollow with
aiokafka; and a *worker* (a bare aiokafka consumer, no faust) that applies each event with
the statements Fanline's worker runs. The statements per route are Fanline's, by kind and
in order (``make bench``'s per-route table): a post's logged batch and counter, then the
fan-out's page of active followers, follower count, check of the tweet and home rows in
batches of 10; a follow's user look-up, event row, edge LWT, reverse row and counter
batch, active-follower row, then the worker's serial read, reverse row, userline read,
merge and trim scan. What it leaves out, so that it stays a floor: validation, every
policy (admission, rate limits, timeouts, retries), the outbox relay's acks and sweeps,
metrics, logs, the session cache's activity refreshes, the live-event tap.

    python -m bench.bare_mix gateway PORT    # env: FANLINE_* engines settings, BARE_TOPIC
    python -m bench.bare_mix worker          # same env
"""

from __future__ import annotations

import asyncio
import gc
import os
import secrets
import sys
import time
import uuid
from typing import Any

import orjson

from fanline_shared.domain import utcnow

KEYSPACE_OWNER = "bare"
HOME_PAGE, FOLLOWER_PAGE, MERGE_ROWS, KEEP_ROWS, BATCH_ROWS = 20, 1000, 20, 800, 10
# The social graph's tables; the tweet-store side's are bench.cql_statements.TABLES (keyspace()).
TABLES = [
    "CREATE TABLE IF NOT EXISTS {keyspace}.users (username_lc text PRIMARY KEY, username text, password_hash text)",
    "CREATE TABLE IF NOT EXISTS {keyspace}.sessions (session_id text PRIMARY KEY, username text)",
    "CREATE TABLE IF NOT EXISTS {keyspace}.following (follower_lc text, followee_lc text, since timestamp, "
    "PRIMARY KEY (follower_lc, followee_lc))",
    "CREATE TABLE IF NOT EXISTS {keyspace}.followers (followee_lc text, follower_lc text, since timestamp, "
    "PRIMARY KEY (followee_lc, follower_lc))",
    "CREATE TABLE IF NOT EXISTS {keyspace}.followers_active (followee_lc text, follower_lc text, "
    "PRIMARY KEY (followee_lc, follower_lc))",
    "CREATE TABLE IF NOT EXISTS {keyspace}.follow_counts (username_lc text PRIMARY KEY, followers counter, following counter)",
]


def keyspace(env: dict[str, str]) -> Any:
    """The bare system's keyspace (``FANLINE_KEYSPACE_PREFIX`` + ``_bare``), not started."""
    from fanline_shared.cassandra.keyspace import Keyspace
    from fanline_shared.storage_service.schema import Migration

    from .context import storage
    from .cql_statements import TABLES as TWEET_TABLES  # imports the driver: after prefer_sources (main)

    tables = [*TABLES, *TWEET_TABLES]
    return Keyspace(storage(env), KEYSPACE_OWNER, [Migration(1, "\n".join(t + ";" for t in tables))])


def hasher() -> Any:
    """argon2 with the bench's cost settings (``[system.env]`` of bench/scenarios.toml)."""
    from argon2 import PasswordHasher

    env = os.environ
    return PasswordHasher(
        time_cost=int(env.get("FANLINE_ARGON2_TIME_COST", "1")),
        memory_cost=int(env.get("FANLINE_ARGON2_MEMORY_KIB", "8192")),
        parallelism=int(env.get("FANLINE_ARGON2_PARALLELISM", "1")),
    )


class Statements:
    """Every statement of both processes, prepared once."""

    def __init__(self, session: Any, ks: str) -> None:
        from fanline_shared.cassandra.connection import prepare

        def p(text: str, **kw: Any) -> Any:
            return prepare(session, text.replace("{ks}", ks), **kw)

        self.session = p("SELECT username FROM {ks}.sessions WHERE session_id = ?")
        self.session_new = p("INSERT INTO {ks}.sessions (session_id, username) VALUES (?, ?)", write=True)
        self.credentials = p("SELECT username, password_hash FROM {ks}.users WHERE username_lc = ?")
        self.users_in = p("SELECT username FROM {ks}.users WHERE username_lc IN ?")
        self.user_new = p("INSERT INTO {ks}.users (username_lc, username, password_hash) VALUES (?, ?, ?)", write=True)
        self.home = p("SELECT tweet_id FROM {ks}.home_timeline WHERE owner_lc = ? LIMIT ?")
        self.userline = p("SELECT tweet_id FROM {ks}.userline WHERE username_lc = ? LIMIT ?")
        self.tweets_in = p("SELECT tweet_id, username, body FROM {ks}.tweets WHERE tweet_id IN ?")
        self.tweet = p("INSERT INTO {ks}.tweets (tweet_id, username, body) VALUES (?, ?, ?)", write=True)
        self.tweet_get = p("SELECT username FROM {ks}.tweets WHERE tweet_id = ?")
        self.userline_add = p("INSERT INTO {ks}.userline (username_lc, tweet_id) VALUES (?, ?)", write=True)
        self.public_add = p("INSERT INTO {ks}.public_timeline (minute, tweet_id) VALUES (?, ?)", write=True)
        self.outbox = p("INSERT INTO {ks}.outbox (shard, minute, event_id, key, payload) VALUES (?, ?, ?, ?, ?)", write=True)
        self.tweet_count = p(
            "UPDATE {ks}.tweet_counts SET tweets = tweets + ? WHERE username_lc = ?", write=True, idempotent=False
        )
        self.follow = p(
            "INSERT INTO {ks}.following (follower_lc, followee_lc, since) VALUES (?, ?, ?) IF NOT EXISTS",
            write=True,
            idempotent=False,
        )
        self.unfollow = p(
            "DELETE FROM {ks}.following WHERE follower_lc = ? AND followee_lc = ? IF EXISTS", write=True, idempotent=False
        )
        self.edge = p("SELECT since FROM {ks}.following WHERE follower_lc = ? AND followee_lc = ?")
        from cassandra import ConsistencyLevel

        self.edge.consistency_level = ConsistencyLevel.LOCAL_SERIAL
        self.follower = p("INSERT INTO {ks}.followers (followee_lc, follower_lc, since) VALUES (?, ?, ?)", write=True)
        self.follower_gone = p("DELETE FROM {ks}.followers WHERE followee_lc = ? AND follower_lc = ?", write=True)
        self.active = p("INSERT INTO {ks}.followers_active (followee_lc, follower_lc) VALUES (?, ?)", write=True)
        self.active_gone = p("DELETE FROM {ks}.followers_active WHERE followee_lc = ? AND follower_lc = ?", write=True)
        self.active_page = p("SELECT follower_lc FROM {ks}.followers_active WHERE followee_lc = ? LIMIT ?")
        self.bump_followers = p(
            "UPDATE {ks}.follow_counts SET followers = followers + ? WHERE username_lc = ?", write=True, idempotent=False
        )
        self.bump_following = p(
            "UPDATE {ks}.follow_counts SET following = following + ? WHERE username_lc = ?", write=True, idempotent=False
        )
        self.counts = p("SELECT followers FROM {ks}.follow_counts WHERE username_lc = ?")
        self.home_add = p(
            "INSERT INTO {ks}.home_timeline (owner_lc, tweet_id, author_lc) VALUES (?, ?, ?) USING TTL 86400", write=True
        )
        self.home_gone = p("DELETE FROM {ks}.home_timeline WHERE owner_lc = ? AND tweet_id = ?", write=True)
        self.home_present = p("SELECT tweet_id FROM {ks}.home_timeline WHERE owner_lc = ? AND tweet_id IN ?")
        self.trim_scan = p("SELECT timeuuidAsBlob(tweet_id) FROM {ks}.home_timeline WHERE owner_lc = ? LIMIT ?")


# --- the gateway ------------------------------------------------------------------------------


class Gateway:
    """Each route: its statements in Fanline's order, JSON in and out with orjson."""

    def __init__(self, session: Any, st: Statements, producer: Any, topic: str) -> None:
        self.session, self.st, self.producer, self.topic = session, st, producer, topic
        self.tokens: dict[str, tuple[float, str]] = {}  # token -> (expiry, username): the session cache
        self.bodies: dict[uuid.UUID, tuple[str, str]] = {}  # tweet id -> (author, body): the tweet cache
        self.hash = hasher()

    async def run(self, statement: Any, params: Any, name: str = "bare") -> list[Any]:
        from fanline_shared.cassandra import execute

        return await execute(self.session, statement, params, name=name)

    async def user_of(self, token: str | None) -> str | None:
        if token is None:
            return None
        now = time.monotonic()
        if (hit := self.tokens.get(token)) is not None and hit[0] > now:
            return hit[1]
        rows = await self.run(self.st.session, (token,))
        if not rows:
            return None
        self.tokens[token] = (now + 60.0, rows[0].username)
        return str(rows[0].username)

    async def page(self, ids: list[uuid.UUID]) -> bytes:
        missing = [i for i in ids if i not in self.bodies]
        if missing:
            for r in await self.run(self.st.tweets_in, (missing,)):
                self.bodies[r.tweet_id] = (r.username, r.body)
        items = [{"id": str(i), "username": self.bodies[i][0], "body": self.bodies[i][1]} for i in ids if i in self.bodies]
        return orjson.dumps({"items": items, "next": items[-1]["id"] if items else None})

    async def publish(self, kind: str, key: str, data: dict[str, Any]) -> None:
        await self.producer.send(self.topic, orjson.dumps({"type": kind, "data": data}), key=key.encode())

    async def handle(self, method: str, path: str, token: str | None, body: bytes) -> tuple[int, bytes]:
        from fanline_shared.cassandra import batch, counter_batch
        from fanline_shared.domain import new_timeuuid

        parts = path.split("?", 1)[0].strip("/").split("/")
        st = self.st
        if parts == ["healthz"]:
            return 200, b"{}"
        if method == "POST" and parts == ["v1", "sessions"]:
            sent = orjson.loads(body)
            rows = await self.run(st.credentials, (sent["username"].lower(),))
            if not rows or not await asyncio.to_thread(self.hash.verify, rows[0].password_hash, sent["password"]):
                return 401, b'{"error":"bad credentials"}'
            token = secrets.token_urlsafe(24)
            await self.run(st.session_new, (token, rows[0].username))
            return 201, orjson.dumps({"token": token, "username": rows[0].username})
        if parts[:2] == ["v1", "users"] and len(parts) == 4 and parts[3] == "tweets" and method == "GET":
            ids = [r.tweet_id for r in await self.run(st.userline, (parts[2].lower(), HOME_PAGE))]
            return 200, await self.page(ids)
        me = await self.user_of(token)
        if me is None:
            return 401, b'{"error":"sign in"}'
        if method == "GET" and parts == ["v1", "timeline"]:
            ids = [r.tweet_id for r in await self.run(st.home, (me.lower(), HOME_PAGE))]
            return 200, await self.page(ids)
        if method == "POST" and parts == ["v1", "tweets"]:
            text, tid, lc = orjson.loads(body)["body"], new_timeuuid(), me.lower()
            event = {"tweet_id": str(tid), "author": me}
            minute = int(time.time() // 60)
            rows = [
                (st.tweet, (tid, me, text)),
                (st.userline_add, (lc, tid)),
                (st.public_add, (minute, tid)),
                (st.outbox, (hash(tid) % 16, minute, tid, lc, orjson.dumps(event))),
            ]
            await asyncio.gather(self.run(batch(rows, logged=True), None), self.run(st.tweet_count, (1, lc)))
            self.bodies[tid] = (me, text)
            await self.publish("TweetCreated", lc, event)
            return 201, orjson.dumps({"id": str(tid), "username": me, "body": text})
        if parts[:2] == ["v1", "users"] and len(parts) == 5 and parts[3] == "following" and method in ("PUT", "DELETE"):
            a, b = parts[2].lower(), parts[4].lower()
            if a != me.lower() or len(await self.run(st.users_in, ([a, b],))) < 2:
                return 404, b'{"error":"no such user"}'
            eid, minute = new_timeuuid(), int(time.time() // 60)
            kind = "Followed" if method == "PUT" else "Unfollowed"
            event = {"follower": a, "followee": b}
            await self.run(st.outbox, (hash(eid) % 16, minute, eid, a, orjson.dumps(event)))
            sign = 1 if method == "PUT" else -1
            if method == "PUT":
                applied = (await self.run(st.follow, (a, b, utcnow())))[0][0]
                writes = [self.run(st.follower, (b, a, utcnow()))]
            else:
                await self.run(st.active_gone, (b, a))
                applied = (await self.run(st.unfollow, (a, b)))[0][0]
                writes = [self.run(st.follower_gone, (b, a))]
            if applied:
                writes.append(self.run(counter_batch([(st.bump_followers, (sign, b)), (st.bump_following, (sign, a))]), None))
            await asyncio.gather(*writes)
            if method == "PUT":
                await self.run(st.active, (b, a))
            await self.publish(kind, a, event)
            return 204, b""
        return 404, b'{"error":"no route"}'


class Http(asyncio.Protocol):
    """HTTP/1.1 keep-alive, one request at a time per connection (as vegeta sends them)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.buffer = b""
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.busy:
            self.next()

    def next(self) -> None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buffer[:end].decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}
        length = int(headers.get("content-length", "0"))
        if len(self.buffer) < end + 4 + length:
            return
        body, self.buffer = self.buffer[end + 4 : end + 4 + length], self.buffer[end + 4 + length :]
        method, path, _ = head[0].split(" ", 2)
        auth = headers.get("authorization", "")
        self.busy = True
        task = asyncio.ensure_future(self.gateway.handle(method, path, auth[7:] if auth.startswith("Bearer ") else None, body))
        task.add_done_callback(self.answer)

    def answer(self, task: asyncio.Future[tuple[int, bytes]]) -> None:
        try:
            status, body = task.result()
        except Exception as exc:  # noqa: BLE001 - a floor, not a service: say what failed
            status, body = 500, orjson.dumps({"error": repr(exc)})
            print(f"500: {exc!r}", file=sys.stderr, flush=True)
        reason = {200: "OK", 201: "Created", 204: "No Content", 401: "Unauthorized", 404: "Not Found"}.get(status, "Error")
        head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        self.transport.write(head.encode() + body)
        self.busy = False
        self.next()


async def serve_gateway(port: int) -> None:
    from aiokafka import AIOKafkaProducer

    ks = keyspace(dict(os.environ))
    await ks.start()
    st = await asyncio.to_thread(Statements, ks.session, ks.name)
    producer = AIOKafkaProducer(bootstrap_servers=os.environ["FANLINE_KAFKA_BOOTSTRAP"], acks="all", enable_idempotence=True)
    await producer.start()
    gateway = Gateway(ks.session, st, producer, os.environ["BARE_TOPIC"])
    server = await asyncio.get_running_loop().create_server(lambda: Http(gateway), "127.0.0.1", port)
    gc.freeze()  # what start-up made, never scanned again: as the services do (http_server)
    print("ready", flush=True)
    await server.serve_forever()


# --- the worker -------------------------------------------------------------------------------


async def apply(session: Any, st: Statements, event: dict[str, Any]) -> int:
    """One event, as Fanline's worker applies it: the statements it ran."""
    from fanline_shared.cassandra import batch, execute, execute_each, keyed_batches

    async def run(statement: Any, params: Any) -> list[Any]:
        return await execute(session, statement, params, name="bare")

    d, kind = event["data"], event["type"]
    if kind == "TweetCreated":
        author, tid = d["author"].lower(), uuid.UUID(d["tweet_id"])
        page, _count = await asyncio.gather(run(st.active_page, (author, FOLLOWER_PAGE)), run(st.counts, (author,)))
        if not await run(st.tweet_get, (tid,)):
            return 3
        owners = [author, *(r.follower_lc for r in page)]
        batches = keyed_batches(session, st.home_add, owners, (tid, author), rows=BATCH_ROWS)
        await execute_each(session, batches, name="bare")
        return 3 + len(batches)
    follower, followee = d["follower"], d["followee"]
    following = bool(await run(st.edge, (follower, followee)))
    if following:
        await run(st.follower, (followee, follower, utcnow()))
    else:
        await run(st.follower_gone, (followee, follower))
    ids = [r.tweet_id for r in await run(st.userline, (followee, MERGE_ROWS))]
    if following and kind == "Followed":
        if ids:
            await run(batch([(st.home_add, (follower, i, followee)) for i in ids]), None)
        await run(st.trim_scan, (follower, KEEP_ROWS + 1))
        return 5
    if not following and kind == "Unfollowed" and ids:
        present = [r.tweet_id for r in await run(st.home_present, (follower, ids))]
        if present:
            await run(batch([(st.home_gone, (follower, i)) for i in present]), None)
        return 5
    return 3


async def serve_worker() -> None:
    from aiokafka import AIOKafkaConsumer

    ks = keyspace(dict(os.environ))
    await ks.start()
    st = await asyncio.to_thread(Statements, ks.session, ks.name)
    consumer = AIOKafkaConsumer(
        os.environ["BARE_TOPIC"],
        bootstrap_servers=os.environ["FANLINE_KAFKA_BOOTSTRAP"],
        group_id=os.environ["BARE_TOPIC"] + ".worker",
        auto_offset_reset="earliest",
        enable_auto_commit=True,
        auto_commit_interval_ms=1000,  # Fanline's worker commits once a second too
    )
    await consumer.start()
    gc.freeze()
    print("ready", flush=True)
    async for message in consumer:
        await apply(ks.session, st, orjson.loads(message.value))


def main(argv: list[str]) -> int:
    import uvloop

    from fanline_shared.driver_sources import prefer_sources

    prefer_sources()  # the driver's build the services run (fanline_shared.storage_service.main)
    if len(argv) == 2 and argv[0] == "gateway":
        uvloop.run(serve_gateway(int(argv[1])))
    elif argv == ["worker"]:
        uvloop.run(serve_worker())
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
