"""POST with an Idempotency-Key, DELETE the tweet, repeat the POST with the
same key: ``404 tweet_not_found`` and nothing comes back (../shared/api.md;
issue 14 found 200 and the deleted tweet restored)."""

from __future__ import annotations

import pytest

from .client import Api

pytestmark = [pytest.mark.e2e]


def test_repeat_after_delete_answers_404_and_restores_nothing(api: Api) -> None:
    name, token = api.user("i")
    headers = {"Idempotency-Key": "once-then-deleted"}
    first = api.request("POST", "/v1/tweets", token, json={"body": "hello"}, headers=headers)
    assert first.status_code == 201, first.text
    tweet_id = first.json()["id"]
    assert api.request("DELETE", f"/v1/tweets/{tweet_id}", token).status_code == 204

    repeat = api.request("POST", "/v1/tweets", token, json={"body": "hello"}, headers=headers)
    assert repeat.status_code == 404, repeat.text
    assert repeat.json()["error"]["code"] == "tweet_not_found"
    assert api.request("GET", f"/v1/tweets/{tweet_id}").status_code == 404
    assert api.page(f"/v1/users/{name}/tweets")["items"] == []
    user = api.request("GET", f"/v1/users/{name}").json()
    assert user["tweets_count"] == 0
