"""api.md "Newer than": ``since_id`` on every timeline, on both backends."""

from __future__ import annotations

import uuid

import pytest

from .client import Api, eventually

TIMELINES = ["home", "user", "public"]


def path(kind: str, username: str) -> str:
    return {"home": "/v1/timeline", "user": f"/v1/users/{username}/tweets", "public": "/v1/public"}[kind]


@pytest.mark.parametrize("kind", TIMELINES)
def test_since_id_pages_back_but_never_past_it(api: Api, kind: str) -> None:
    author, author_token = api.user("sa")
    reader, reader_token = api.user("sr")
    api.follow(reader_token, reader, author)
    ids = [api.post(author_token, f"since {i}")["id"] for i in range(6)]
    token = reader_token if kind == "home" else None
    p = path(kind, author)
    if kind == "home":
        eventually(lambda: ids[-1] in api.home_ids(reader_token), what="fan-out to the reader")

    # Strictly newer than ids[1], newest first, `limit` at a time.
    first = api.page(p, token, limit=2, since_id=ids[1])
    assert [t["id"] for t in first["items"]] == [ids[5], ids[4]]
    assert first["next_cursor"]
    # The cursor carries the bound: the client need not repeat since_id.
    second = api.page(p, token, limit=2, cursor=first["next_cursor"])
    assert [t["id"] for t in second["items"]] == [ids[3], ids[2]]
    if second["next_cursor"] is not None:
        assert api.page(p, token, limit=2, cursor=second["next_cursor"])["items"] == []
    # Repeating since_id with the cursor changes nothing.
    again = api.page(p, token, limit=2, cursor=first["next_cursor"], since_id=ids[1])
    assert [t["id"] for t in again["items"]] == [ids[3], ids[2]]
    # Nothing newer than the newest.
    assert api.page(p, token, since_id=ids[5]) == {"items": [], "next_cursor": None}
    # The newest only, on the public line too (other tests may post meanwhile).
    newest = api.page(p, token, limit=100, since_id=ids[4])["items"]
    assert ids[5] in [t["id"] for t in newest] and all(t["id"] not in ids[:5] for t in newest)


@pytest.mark.parametrize("kind", TIMELINES)
@pytest.mark.parametrize("bad", ["nope", "12345678-1234-4234-8234-123456789abc", "", " ", "x" * 300])
def test_a_malformed_since_id_is_422(api: Api, kind: str, bad: str) -> None:
    name, token = api.user("sm")
    r = api.request("GET", path(kind, name), token if kind == "home" else None, params={"since_id": bad})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid_since_id"


def test_home_reports_a_bad_token_before_a_bad_since_id(api: Api) -> None:
    r = api.request("GET", "/v1/timeline", "not-a-token", params={"since_id": "nope"})
    assert r.status_code == 401


def test_a_since_id_of_an_unknown_tweet_still_bounds_by_time(api: Api) -> None:
    author, token = api.user("su")
    old = api.post(token, "before the bound")["id"]
    bound = str(uuid.uuid1())  # no such tweet, but newer than `old`
    new = api.post(token, "after the bound")["id"]
    items = [t["id"] for t in api.page(f"/v1/users/{author}/tweets", None, since_id=bound)["items"]]
    assert items == [new] and old not in items


def test_openapi_describes_since_id_and_the_streams(api: Api) -> None:
    paths = api.page("/openapi.json")["paths"]
    for p in ("/v1/timeline", "/v1/users/{username}/tweets", "/v1/public"):
        assert "since_id" in {param["name"] for param in paths[p]["get"]["parameters"]}, p
    assert "429" in paths["/v1/streaming/home"]["get"]["responses"]
    assert "text/event-stream" in paths["/v1/streaming/public"]["get"]["responses"]["200"]["content"]
