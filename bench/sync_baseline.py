"""The synchronous fan-out baseline: Twissandra's ``save_tweet`` as an endpoint
(benchmark only). ``POST /tweets`` does, inside the request and before its
201: authenticate the bearer token through the same social-graph the gateway
uses; write the tweet, userline and public-line rows while reading **all** the
author's followers from its own ``followers`` table; write the author's and
every follower's home row — tweet-store's table and TTL'd INSERT, batched as
tweet-store batches (replica-grouped unlogged batches of ``--batch-rows``, ``keyed_batches``),
``--concurrency`` batches in flight through the product's asyncio bridge.

    python -m bench.sync_baseline PORT KEYSPACE SOCIAL_GRAPH_URL CONCURRENCY BATCH_ROWS

Cassandra as the services read it, from the ``FANLINE_CASSANDRA_*`` environment; its tables
(``sync_baseline.cql``) in a keyspace of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import uvicorn
from cassandra.util import unix_time_from_uuid1
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fanline_shared import cassandra as cql
from fanline_shared.config import Env, StorageSettings

RETENTION_S = 30 * 24 * 3600  # tweet-store's default FANLINE_HOME_RETENTION_S
SCHEMA = Path(__file__).with_name("sync_baseline.cql").read_text()
STATEMENTS = {
    "tweet": "INSERT INTO {keyspace}.tweets (tweet_id, username, body) VALUES (?, ?, ?)",
    "userline": "INSERT INTO {keyspace}.userline (username_lc, tweet_id) VALUES (?, ?)",
    "public": "INSERT INTO {keyspace}.public_timeline (minute, tweet_id) VALUES (?, ?)",
    "followers": "SELECT follower_lc FROM {keyspace}.followers WHERE followee_lc = ?",
    "home": "INSERT INTO {keyspace}.home_timeline (owner_lc, tweet_id, author_lc) VALUES (?, ?, ?) USING TTL ?",
}


def create_app(storage: StorageSettings, keyspace: str, social_graph_url: str, concurrency: int, batch_rows: int) -> Starlette:
    state: dict[str, Any] = {}
    internal = {"X-Fanline-Internal-Token": os.environ.get("FANLINE_INTERNAL_TOKEN", "")}

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        state["session"] = session = await cql.open_session(storage)
        for name, text in STATEMENTS.items():
            text, write = text.format(keyspace=keyspace), text.startswith("INSERT")
            state[name] = await asyncio.to_thread(cql.prepare, session, text, write=write)
        async with aiohttp.ClientSession(social_graph_url, headers=internal) as http:
            state["http"] = http
            yield
        await cql.close_session(session)

    async def post(request: Request) -> Response:
        s, http = state["session"], state["http"]
        auth = {"authorization": request.headers.get("authorization", "")}
        async with http.get("/internal/sessions/current", headers=auth) as r:
            if r.status != 200:
                return JSONResponse({"error": {"code": "unauthorized"}}, 401)
            author = str((await r.json())["username"])
        body = str((await request.json()).get("body", ""))
        tweet_id, author_lc = uuid.uuid1(), author.lower()
        created = unix_time_from_uuid1(tweet_id)
        *_, followers = await asyncio.gather(
            cql.execute(s, state["tweet"], (tweet_id, author, body), name="sync_tweet"),
            cql.execute(s, state["userline"], (author_lc, tweet_id), name="sync_userline"),
            cql.execute(s, state["public"], (int(created // 60), tweet_id), name="sync_public"),
            cql.execute(s, state["followers"], (author_lc,), name="sync_followers"),  # every page, off the loop
        )
        ttl = int(RETENTION_S - (time.time() - created))
        owners = [author_lc, *(r.follower_lc for r in followers)]
        batches = cql.keyed_batches(s, state["home"], owners, (tweet_id, author_lc, ttl), rows=batch_rows)
        await cql.execute_each(s, batches, name="sync_home", concurrency=concurrency)
        return JSONResponse({"id": str(tweet_id), "username": author, "body": body, "rows": len(owners)}, 201)

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/tweets", post, methods=["POST"]), Route("/healthz", healthz)], lifespan=lifespan)


def main() -> None:
    port, keyspace, social_graph_url, concurrency, batch_rows = sys.argv[1:]
    storage = StorageSettings.from_env(Env({**os.environ, "FANLINE_BACKEND": "cassandra", "FANLINE_CASSANDRA_TIMEOUT_S": "20"}))
    app = create_app(storage, keyspace, social_graph_url, int(concurrency), int(batch_rows))
    # served as the services are (fanline_shared.http_server): uvloop and httptools, no access log
    uvicorn.run(app, host="127.0.0.1", port=int(port), loop="uvloop", http="httptools", access_log=False, log_level="warning")


if __name__ == "__main__":
    main()
