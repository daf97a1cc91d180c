"""tweet-store's timelines as plain calls for a gateway hosting it
(``http_local.Direct``, issue 31): every page and every error the same as its
routes give over the short way, on the embedded backend; and a plain call is
user-facing work the fan-out yields to, as the route is."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette

from fanline_shared import http_local
from fanline_shared.clients.tweet_store import TweetStoreClient
from fanline_shared.errors import DomainError
from fanline_tweet_store.app import create_app
from fanline_tweet_store.config import Settings
from fanline_tweet_store.sids import to_sid

TOKEN = "unit-direct-internal-token"
FOLLOWERS = ["bob", "carol"]


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[Starlette]:
    app = create_app(Settings.from_env({"FANLINE_DATA_DIR": str(tmp_path), "FANLINE_INTERNAL_TOKEN": TOKEN}))
    async with app.router.lifespan_context(app):
        http_local.host("tweet-store", http_local.Hosted(app, ("127.0.0.1", 9), lambda: {}))
        try:
            yield app
        finally:
            http_local.unhost("tweet-store")


def client() -> TweetStoreClient:
    # A port nothing listens on: a call that left the process would fail.
    return TweetStoreClient("api", "http://127.0.0.1:9", 2.0, token=TOKEN)


def short_way(app: Starlette) -> TweetStoreClient:
    """A client of the same hosted app whose timelines go through the routes."""
    app.state.in_process = dataclasses.replace(app.state.in_process, calls={})
    http_local.host("tweet-store", http_local.Hosted(app, ("127.0.0.1", 9), lambda: {}))
    return client()


async def outcome(store: TweetStoreClient, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return await store.timeline(*args, **kwargs)
    except DomainError as exc:
        return (type(exc).__name__, exc.code, exc.message)


async def test_every_page_and_error_is_the_routes(app: Starlette) -> None:
    direct = client()
    assert direct.offers("timeline_home") and direct.offers("timeline_user") and direct.offers("timeline_public")
    ids = []
    for i in range(7):
        tweet = (await direct.create_tweet("alice", f"tweet {i}", None))["tweet"]
        ids.append(tweet["id"])
        await direct.home_add(tweet["id"], "alice", FOLLOWERS)
    newest, middle, oldest = ids[-1], ids[3], ids[0]
    sid = int(to_sid(uuid.UUID(middle)))
    cases: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        (("home", "bob", 3, None), {}),
        (("home", "bob", 3, ids[4]), {}),  # the next page
        (("home", "carol", 20, None, oldest), {}),  # newer than
        (("home", "dave", 20, None), {}),  # an empty home
        (("user", "alice", 2, newest), {}),
        (("public", None, 5, None), {}),
        (("home", "bob", 2, None), {"sids": {"max_sid": sid}}),
        (("home", "bob", 2, None), {"sids": {"min_sid": sid}}),
        (("home", "bob", 20, None), {"sids": {"since_sid": sid}}),
        (("home", "bob", 0, None), {}),  # errors: a limit out of range
        (("home", "bob", 3, "not-a-cursor"), {}),
        (("home", "bob", 3, None, "not-an-id"), {}),
        (("home", "bob", 3, None), {"sids": {"max_sid": "x"}}),
    ]
    plain = [await outcome(direct, args, kwargs) for args, kwargs in cases]
    routed = short_way(app)
    assert not routed.offers("timeline_home")
    assert plain == [await outcome(routed, args, kwargs) for args, kwargs in cases]
    assert [t["id"] for t in plain[0]["items"]] == ids[::-1][:3]  # and the pages are not all empty
    assert all(isinstance(p, tuple) for p in plain[-4:]), plain[-4:]  # nor the errors answers


async def test_a_plain_call_is_user_facing_work(app: Starlette, monkeypatch: pytest.MonkeyPatch) -> None:
    touched: list[int] = []
    monkeypatch.setattr(app.state.activity, "touch", lambda: touched.append(1))
    await client().timeline("home", "bob", 20, None)
    assert touched == [1, 1]  # on entry and on exit: the fan-out yields meanwhile and for quiet_s after
