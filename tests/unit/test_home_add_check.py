"""tweet-store's ``/internal/home/add`` with ``check``: the fan-out worker's
first page of a tweet asks tweet-store to check the tweet itself (issue 31:
one call per tweet fewer than a separate ``GET /internal/tweets/{id}``), so
nothing may be written for a tweet that is gone or is not the author's."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from starlette.testclient import TestClient

from fanline_tweet_store.app import create_app
from fanline_tweet_store.config import Settings

TOKEN = "unit-test-internal-token"


@pytest.fixture
def client(tmp_path: Any) -> Any:
    app = create_app(Settings.from_env({"FANLINE_DATA_DIR": str(tmp_path), "FANLINE_INTERNAL_TOKEN": TOKEN}))
    with TestClient(app, headers={"X-Fanline-Internal-Token": TOKEN}) as c:
        yield c


def home_ids(client: Any, owner: str) -> list[str]:
    answer = client.get(f"/internal/home/{owner}", params={"limit": 20})
    assert answer.status_code == 200, answer.text
    return [t["id"] for t in answer.json()["items"]]


def post(client: Any, author: str) -> str:
    answer = client.post("/internal/tweets", json={"username": author, "body": "hello"})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["tweet"]["id"])


@pytest.mark.parametrize(
    ("case", "status", "code"),
    [
        ("author's tweet", 204, None),
        ("another author's tweet", 409, "author_mismatch"),
        ("no such tweet", 404, "tweet_not_found"),
        ("deleted tweet", 404, "tweet_not_found"),
    ],
)
def test_a_checked_page_is_written_only_for_the_authors_stored_tweet(
    client: Any, case: str, status: int, code: str | None
) -> None:
    tweet_id = str(uuid.uuid1()) if case == "no such tweet" else post(client, "alice")
    if case == "deleted tweet":
        assert client.delete(f"/internal/tweets/{tweet_id}", params={"actor": "alice"}).status_code == 200
    author = "mallory" if case == "another author's tweet" else "alice"
    page = {"tweet_id": tweet_id, "author": author, "owners": ["bob", "carol"], "check": True}
    answer = client.post("/internal/home/add", json=page)
    assert answer.status_code == status, answer.text
    if code is not None:
        assert answer.json()["error"]["code"] == code
    for owner in ("bob", "carol"):
        assert home_ids(client, owner) == ([tweet_id] if status == 204 else [])


def test_check_must_be_a_boolean_and_writes_nothing_otherwise(client: Any) -> None:
    tweet_id = post(client, "alice")
    answer = client.post("/internal/home/add", json={"tweet_id": tweet_id, "author": "alice", "owners": ["bob"], "check": "yes"})
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "invalid_check"
    assert home_ids(client, "bob") == []


def test_an_unchecked_page_is_written_as_before(client: Any) -> None:
    """Pages after the first (and older workers) send no check."""
    tweet_id = str(uuid.uuid1())
    assert client.post("/internal/home/add", json={"tweet_id": tweet_id, "author": "alice", "owners": ["bob"]}).status_code == 204
