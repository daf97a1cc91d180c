"""The synchronous fan-out baseline: Twissandra's ``save_tweet`` as an endpoint.

Benchmark harness only — never part of the product. ``POST /tweets`` does,
inside the request and before answering 201, what Twissandra's
``save_tweet`` did:

1. authenticate the bearer token through the same social-graph service the
   gateway uses (so both sides pay the same authentication hop);
2. write the tweet, the author's userline row and the public-line row
   (concurrently — kinder to the baseline than Twissandra's sequential
   ``session.execute`` calls) while reading **all** the author's followers
   (every page; Twissandra stopped at 5,000);
3. write the author's and every follower's home-timeline row — same table
   definition and same TTL'd prepared INSERT as tweet-store, **batched as
   tweet-store batches them** (replica-grouped unlogged batches of
   ``--batch-rows`` rows, ``replica_batches``; issue 18) — with bounded
   concurrency (``--concurrency`` batches in flight), through the same asyncio
   bridge the product uses (``fanline_shared.cassandra.execute_each``);
4. answer 201 with the tweet.

Its tables live in its own keyspace on the same Cassandra node (``SCHEMA``).
Run: ``python -m bench.baseline --port P --keyspace K --social-graph-url U``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cassandra.cluster import Session
from cassandra.query import PreparedStatement
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from fanline_shared import cassandra as cql
from fanline_shared import policies
from fanline_shared.clients.social_graph import SocialGraphClient
from fanline_shared.config import HttpSettings, StorageSettings
from fanline_shared.domain import canonical, new_timeuuid, timeuuid_time
from fanline_shared.errors import DomainError
from fanline_shared.http_routes import json_response
from fanline_shared.http_server import serve

RETENTION_S = 30 * 24 * 3600  # tweet-store's default FANLINE_HOME_RETENTION_S

SCHEMA = """
CREATE TABLE IF NOT EXISTS {keyspace}.tweets (
    tweet_id timeuuid PRIMARY KEY,
    username text,
    body text
);
CREATE TABLE IF NOT EXISTS {keyspace}.userline (
    username_lc text,
    tweet_id timeuuid,
    PRIMARY KEY (username_lc, tweet_id)
) WITH CLUSTERING ORDER BY (tweet_id DESC);
CREATE TABLE IF NOT EXISTS {keyspace}.public_timeline (
    minute bigint,
    tweet_id timeuuid,
    PRIMARY KEY (minute, tweet_id)
) WITH CLUSTERING ORDER BY (tweet_id DESC);
CREATE TABLE IF NOT EXISTS {keyspace}.followers (
    followee_lc text,
    follower_lc text,
    follower text,
    since timestamp,
    PRIMARY KEY (followee_lc, follower_lc)
) WITH CLUSTERING ORDER BY (follower_lc ASC);
CREATE TABLE IF NOT EXISTS {keyspace}.home_timeline (
    owner_lc text,
    tweet_id timeuuid,
    author_lc text,
    PRIMARY KEY (owner_lc, tweet_id)
) WITH CLUSTERING ORDER BY (tweet_id DESC);
"""

HOME_INSERT = "INSERT INTO {keyspace}.home_timeline (owner_lc, tweet_id, author_lc) VALUES (?, ?, ?) USING TTL ?"


@dataclass
class _State:
    session: Session
    social: SocialGraphClient
    tweet: PreparedStatement
    userline: PreparedStatement
    public: PreparedStatement
    followers: PreparedStatement
    home: PreparedStatement


def create_app(
    storage: StorageSettings,
    keyspace: str,
    social_graph_url: str,
    concurrency: int,
    batch_rows: int = policies.DEFAULT_HOME_WRITE_BATCH_ROWS,
) -> Starlette:
    holder: list[_State] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        session = await cql.open_session(storage)

        def prep(text: str) -> PreparedStatement:
            return cql.prepare(session, text.format(keyspace=keyspace), write=text.startswith("INSERT"))

        def prepare_all() -> _State:
            return _State(
                session=session,
                social=SocialGraphClient("sync-baseline", social_graph_url, 10.0, token=os.environ.get("FANLINE_INTERNAL_TOKEN")),
                tweet=prep("INSERT INTO {keyspace}.tweets (tweet_id, username, body) VALUES (?, ?, ?)"),
                userline=prep("INSERT INTO {keyspace}.userline (username_lc, tweet_id) VALUES (?, ?)"),
                public=prep("INSERT INTO {keyspace}.public_timeline (minute, tweet_id) VALUES (?, ?)"),
                followers=prep("SELECT follower_lc FROM {keyspace}.followers WHERE followee_lc = ?"),
                home=prep(HOME_INSERT),
            )

        holder.append(await asyncio.to_thread(prepare_all))
        try:
            yield
        finally:
            await holder[0].social.close()
            await cql.close_session(session)

    async def post(request: Request) -> Response:
        st = holder[0]
        _scheme, _, token = (request.headers.get("authorization") or "").partition(" ")
        try:
            author = await st.social.authenticate(token.strip())
        except DomainError as exc:
            return json_response({"error": {"code": exc.code, "message": exc.message}}, 401)
        body = str((await request.json()).get("body", ""))
        tweet_id = new_timeuuid()
        author_lc = canonical(author)
        minute = cql.unix_minute(timeuuid_time(tweet_id))
        s = st.session
        _, _, _, followers = await asyncio.gather(
            cql.execute(s, st.tweet, (tweet_id, author, body), name="sync_tweet"),
            cql.execute(s, st.userline, (author_lc, tweet_id), name="sync_userline"),
            cql.execute(s, st.public, (minute, tweet_id), name="sync_public"),
            cql.execute(s, st.followers, (author_lc,), name="sync_followers"),  # every page, off-loop
        )
        ttl = int(RETENTION_S - (datetime.now(UTC) - timeuuid_time(tweet_id)).total_seconds())
        owners = [author_lc, *(row.follower_lc for row in followers)]
        rows = [(o, tweet_id, author_lc, ttl) for o in owners]
        if batch_rows > 1:
            await cql.execute_each(
                s, cql.replica_batches(s, st.home, rows, rows=batch_rows), name="sync_home", concurrency=concurrency
            )
        else:
            await cql.execute_concurrent(s, st.home, rows, name="sync_home", concurrency=concurrency)
        return json_response({"id": str(tweet_id), "username": author, "body": body, "rows": len(owners)}, 201)

    async def healthz(_: Request) -> Response:
        return json_response({"status": "ok"})

    return Starlette(
        routes=[Route("/tweets", post, methods=["POST"]), Route("/healthz", healthz, methods=["GET"])], lifespan=lifespan
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Twissandra-style synchronous fan-out endpoint (benchmark only)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--keyspace", required=True)
    parser.add_argument("--social-graph-url", required=True)
    parser.add_argument("--cassandra", default="127.0.0.1:9042")
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument(
        "--batch-rows",
        type=int,
        default=policies.DEFAULT_HOME_WRITE_BATCH_ROWS,
        help="rows per replica-grouped unlogged batch (1: single-row inserts)",
    )
    args = parser.parse_args()
    host, port = args.cassandra.rsplit(":", 1)
    storage = StorageSettings(
        backend="cassandra",
        data_dir=Path("."),
        cassandra_hosts=(host,),
        cassandra_port=int(port),
        keyspace_prefix="unused",
        replication_factor=1,
        local_dc="datacenter1",
        request_timeout_s=20.0,
    )
    app = create_app(storage, args.keyspace, args.social_graph_url, args.concurrency, args.batch_rows)
    serve(app, HttpSettings(host="127.0.0.1", port=args.port), "sync-baseline")


if __name__ == "__main__":
    main()
