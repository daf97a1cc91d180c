"""api.md "Live updates — server-sent events", end to end on both backends
(and on the small-threshold systems, where most authors are large accounts).

Streams are read the way a browser's EventSource reads them (``sse.py``).
Every system runs with a 1 s heartbeat (``FAST_ENV``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from deploy.local.system import System

from .client import Api
from .sse import Listener

UPDATE_WITHIN_S = 2.0


class Streams:
    """Listeners opened by one test, all closed at its end."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.opened: list[Listener] = []

    def open(
        self,
        path: str = "/v1/streaming/home",
        token: str | None = None,
        base_url: str | None = None,
        last_event_id: str | None = None,
        cookies: dict[str, str] | None = None,
    ) -> Listener:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        listener = Listener((base_url or self.base_url) + path, headers, cookies or {})
        self.opened.append(listener)
        return listener

    def close(self) -> None:
        for listener in self.opened:
            listener.close()


@pytest.fixture
def streams(system: System) -> Iterator[Streams]:
    helper = Streams(system.url())
    yield helper
    helper.close()


def post_timed(api: Api, token: str, body: str) -> tuple[dict[str, Any], float]:
    """Post; return the tweet and the time its 201 arrived."""
    r = api.request("POST", "/v1/tweets", token, json={"body": body})
    assert r.status_code == 201, r.text
    return r.json(), time.time()


def test_a_follower_gets_the_update_within_2_s_and_the_delete(api: Api, streams: Streams) -> None:
    author, author_token = api.user("la")
    fan, fan_token = api.user("lf")
    api.follow(fan_token, fan, author)
    stream = streams.open(token=fan_token)
    assert stream.status == 200, stream.body
    assert stream.response_headers is not None
    assert stream.response_headers["content-type"].startswith("text/event-stream")
    assert stream.response_headers["cache-control"] == "no-store"
    mine = streams.open(token=author_token)  # the author's own home stream

    tweet, answered = post_timed(api, author_token, "live!")
    update = stream.wait("update", tweet["id"])
    assert update.json() == tweet
    assert update.at - answered <= UPDATE_WITHIN_S, f"update {update.at - answered:.2f}s after the 201"
    assert mine.wait("update", tweet["id"]).json() == tweet

    assert api.request("DELETE", f"/v1/tweets/{tweet['id']}", author_token).status_code == 204
    assert stream.wait("delete", tweet["id"]).json() == {"id": tweet["id"]}
    assert stream.updates().count(tweet["id"]) == 1


def test_only_followed_authors_reach_a_home_stream(api: Api, streams: Streams) -> None:
    _, stranger_token = api.user("ls")
    fan, fan_token = api.user("lf")
    friend, friend_token = api.user("lq")
    api.follow(fan_token, fan, friend)
    stream = streams.open(token=fan_token)
    ignored = api.post(stranger_token, "not for you")
    wanted = api.post(friend_token, "for you")
    stream.wait("update", wanted["id"])
    assert ignored["id"] not in stream.updates()


def test_the_public_stream_gets_every_tweet_without_auth(api: Api, streams: Streams) -> None:
    _, token = api.user("lp")
    stream = streams.open("/v1/streaming/public")
    assert stream.status == 200, stream.body
    tweet = api.post(token, "for everyone")
    assert stream.wait("update", tweet["id"]).json() == tweet
    assert api.request("DELETE", f"/v1/tweets/{tweet['id']}", token).status_code == 204
    stream.wait("delete", tweet["id"])


def test_heartbeat_comments_keep_the_stream_open(api: Api, streams: Streams) -> None:
    _, token = api.user("lh")
    stream = streams.open(token=token)
    deadline = time.monotonic() + 5
    while len(stream.comments) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(stream.comments) >= 2, "no heartbeat comments"


@pytest.mark.parametrize("auth", [None, "Bearer nonsense", "Basic abc", "Bearer nobody.xyz"])
def test_a_home_stream_needs_a_valid_token(api: Api, streams: Streams, auth: str | None) -> None:
    headers = {"Authorization": auth} if auth else {}
    r = httpx.get(streams.base_url + "/v1/streaming/home", headers=headers, timeout=10)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthorized"


def test_the_web_session_cookie_opens_a_home_stream(api: Api, streams: Streams) -> None:
    _, token = api.user("lc")
    stream = streams.open(cookies={"fanline_session": token})
    assert stream.status == 200, stream.body
    tweet = api.post(token, "via the cookie")
    stream.wait("update", tweet["id"])
    r = httpx.get(streams.base_url + "/v1/streaming/home", cookies={"fanline_session": "x.y"}, timeout=10)
    assert r.status_code == 401


def test_a_fifth_stream_is_429_until_one_closes(api: Api, streams: Streams) -> None:
    _, token = api.user("l5")
    four = [streams.open(token=token) for _ in range(4)]
    assert all(s.status == 200 for s in four)
    fifth = streams.open(token=token)
    assert fifth.status == 429, fifth.body
    assert '"too_many_streams"' in fifth.body
    four[0].close()
    deadline = time.monotonic() + 10
    while True:
        again = streams.open(token=token)
        if again.status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert again.status == 200, "a closed stream's slot was not freed"


@pytest.mark.parametrize("how", ["header", "query"])
def test_last_event_id_replays_what_was_missed_then_goes_live(api: Api, streams: Streams, how: str) -> None:
    author, author_token = api.user("lr")
    fan, fan_token = api.user("lf")
    api.follow(fan_token, fan, author)
    first = api.post(author_token, "seen")["id"]
    missed = [api.post(author_token, f"missed {i}")["id"] for i in range(3)]
    # The follower's home has them (fan-out, or a read-time merge).
    deadline = time.monotonic() + 20
    while missed[-1] not in api.home_ids(fan_token) and time.monotonic() < deadline:
        time.sleep(0.1)
    if how == "header":
        stream = streams.open(token=fan_token, last_event_id=first)
    else:  # what the web pages' EventSource sends on its first request
        stream = streams.open(f"/v1/streaming/home?last_event_id={first}", token=fan_token)
    assert stream.status == 200, stream.body
    live = api.post(author_token, "live again")["id"]
    stream.wait("update", live)
    # Oldest first, then live, nothing twice, nothing older than the id.
    assert stream.updates() == [*missed, live]


def test_a_malformed_last_event_id_is_422(api: Api, streams: Streams) -> None:
    _, token = api.user("lm")
    for path, tok in (("/v1/streaming/home", token), ("/v1/streaming/public", None)):
        auth = {"Authorization": f"Bearer {tok}"} if tok else {}
        r = httpx.get(streams.base_url + path, timeout=10, headers={"Last-Event-ID": "nope", **auth})
        assert r.status_code == 422
        assert r.json()["error"]["code"] == "invalid_last_event_id"
        r = httpx.get(streams.base_url + path + "?last_event_id=nope", timeout=10, headers=auth)
        assert r.status_code == 422


def test_the_public_stream_resumes_too(api: Api, streams: Streams) -> None:
    _, token = api.user("lp")
    first = api.post(token, "public one")["id"]
    second = api.post(token, "public two")["id"]
    stream = streams.open("/v1/streaming/public", last_event_id=first)
    assert stream.wait("update", second).json()["body"] == "public two"
    assert first not in stream.updates()


def test_unfollow_deletes_the_authors_tweets_and_follow_brings_new_ones(api: Api, streams: Streams) -> None:
    author, author_token = api.user("lu")
    fan, fan_token = api.user("lf")
    api.follow(fan_token, fan, author)
    stream = streams.open(token=fan_token)
    tweet = api.post(author_token, "soon unfollowed")
    stream.wait("update", tweet["id"])
    api.unfollow(fan_token, fan, author)
    stream.wait("delete", tweet["id"])
    after = api.post(author_token, "not followed now")
    api.follow(fan_token, fan, author)
    again = api.post(author_token, "followed again")
    stream.wait("update", again["id"])
    assert after["id"] not in stream.updates()


def test_large_accounts_reach_their_followers_streams(small_api: Api, small_system: System) -> None:
    api = small_api
    author, author_token = api.user("lb")
    fans = [api.user("lf") for _ in range(4)]  # threshold 3: a large account
    for name, token in fans:
        api.follow(token, name, author)
    helper = Streams(small_system.url())
    try:
        listeners = [helper.open(token=token) for _, token in fans]
        tweet, answered = post_timed(api, author_token, "to the many, live")
        for listener in listeners:
            assert listener.wait("update", tweet["id"]).at - answered <= UPDATE_WITHIN_S
    finally:
        helper.close()


def test_a_stream_on_another_gateway_replica_gets_the_update(api: Api, system: System) -> None:
    """Two gateway processes: the post goes to one, the stream is on the other."""
    author, author_token = api.user("l2")
    fan, fan_token = api.user("lf")
    api.follow(fan_token, fan, author)
    replica = system.start_api_replica(1) if "api-1" not in system.procs else system.replica_url(1)
    helper = Streams(replica)
    try:
        stream = helper.open(token=fan_token)
        public = helper.open("/v1/streaming/public")
        assert stream.status == 200, stream.body
        # A fresh replica's tap starts at the end of the topic once assigned:
        # wait until it demonstrably hears posts made on the first gateway.
        deadline = time.monotonic() + 30
        while True:
            probe = api.post(author_token, "warming up")["id"]
            try:
                public.wait("update", probe, timeout=2)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
        tweet, answered = post_timed(api, author_token, "across replicas")
        assert stream.wait("update", tweet["id"]).at - answered <= UPDATE_WITHIN_S
        public.wait("update", tweet["id"])
        assert api.request("DELETE", f"/v1/tweets/{tweet['id']}", author_token).status_code == 204
        stream.wait("delete", tweet["id"])
    finally:
        helper.close()
