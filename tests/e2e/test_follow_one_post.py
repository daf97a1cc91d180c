"""Follow one post through the system (docs/operations/monitor.md, "Follow one post").

A client posts with its own ``X-Request-Id``; the gateway returns it, and the
id is then found in the JSON log lines of every process the post went
through: the gateway (stored, published), tweet-store (stored, each page of
home rows), social-graph (each page of active followers) and the fan-out
worker (written; on real Kafka also the slices handed on through the chunks
topic, since 12 followers make two slices with the test's slice size of 10).
The logs are the files the e2e ``System`` writes, read as an operator would.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from deploy.local.system import System

from .client import Api, eventually

FOLLOWERS = 12  # > FANLINE_FANOUT_CHUNK (10) in the e2e settings: a sliced fan-out on real Kafka


@pytest.fixture(params=["embedded", pytest.param("real", marks=pytest.mark.real_infra)])
def traced_system(request: pytest.FixtureRequest) -> System:
    return request.getfixturevalue(f"{request.param}_system")  # type: ignore[no-any-return]


def log_lines(system: System, process: str, request_id: str) -> list[dict[str, Any]]:
    """The JSON log lines of ``process`` that carry ``request_id``."""
    assert system.log_dir is not None
    path = Path(system.log_dir) / f"{process}.log"
    found = []
    for raw in path.read_bytes().splitlines():
        if request_id.encode() not in raw or not raw.startswith(b"{"):
            continue
        line = orjson.loads(raw)
        if line.get("request_id") == request_id:
            found.append(line)
    return found


def steps(system: System, process: str, request_id: str) -> set[str]:
    return {line["event"] for line in log_lines(system, process, request_id)}


def test_one_posts_request_id_is_in_every_step_of_its_fan_out(traced_system: System) -> None:
    system = traced_system
    api = Api(system.url("api"))
    try:
        author, author_token = api.user("tr")
        fans = [api.user("tf") for _ in range(FOLLOWERS)]
        for name, token in fans:
            api.follow(token, name, author)
        request_id = f"trace-{uuid.uuid4().hex}"
        r = api.request(
            "POST", "/v1/tweets", author_token, json={"body": "follow me through"}, headers={"X-Request-Id": request_id}
        )
        assert r.status_code == 201, r.text
        assert r.headers["x-request-id"] == request_id
        tweet_id = r.json()["id"]
        for name, token in (fans[0], fans[-1]):
            eventually(
                lambda token=token: tweet_id in [t["id"] for t in api.all_items("/v1/timeline", token)],
                what=f"tweet in {name}'s home",
            )

        expected = {
            "api": {"tweet.posted", "event.published"},
            "tweet-store": {"tweet.stored", "home.rows_written"},
            "social-graph": {"followers.page"},
            "fanout-worker": {"fanout.written"},
        }
        sliced = system.kafka_bootstrap is not None
        if sliced:
            # Real Kafka: more followers than one slice (FANLINE_FANOUT_CHUNK in
            # the test settings), so the fan-out goes on in slices. The event
            # either hands all of it on ("fanout.sliced": the follower count it
            # read was past one slice) or writes the first slice itself
            # ("fanout.written": the count lagged the follows just made).
            expected["fanout-worker"] = {"fanout.slice_published", "fanout.slice_written"}

        def all_steps_logged() -> bool:
            if sliced and not {"fanout.sliced", "fanout.written"} & steps(system, "fanout-worker", request_id):
                return False
            return all(want <= steps(system, process, request_id) for process, want in expected.items())

        eventually(
            all_steps_logged,
            timeout=30,
            what=f"steps of {request_id}: " + str({p: steps(system, p, request_id) for p in expected}),
        )

        # Every home row of the post is accounted for, page by page, under its id.
        # (eventually: a fan-out in two slices logs "fanout.slice_written" after the first one)
        def written() -> int:
            return sum(
                int(line["rows"]) for line in log_lines(system, "tweet-store", request_id) if line["event"] == "home.rows_written"
            )

        eventually(lambda: written() >= FOLLOWERS + 1, timeout=30, what="every home row logged under the id")
        assert written() == FOLLOWERS + 1  # the followers and the author's own row
        worker = log_lines(system, "fanout-worker", request_id)
        assert all(line["event_type"] in ("TweetCreated", "FanoutChunk") for line in worker)
        assert all(line["tweet_id"] == tweet_id for line in worker if "tweet_id" in line)
    finally:
        api.close()


def test_a_malformed_request_id_is_replaced_not_logged(embedded_system: System) -> None:
    api = Api(embedded_system.url("api"))
    try:
        r = api.request("GET", "/v1/public", headers={"X-Request-Id": "not ok\u0001"[:6] + " x"})
        assert r.status_code == 200
        made = r.headers["x-request-id"]
        assert made != "not ok x" and len(made) == 32 and made.isalnum()
        r = api.request("GET", "/v1/public", headers={"X-Request-Id": "lb-7f3a:1"})
        assert r.headers["x-request-id"] == "lb-7f3a:1"
    finally:
        api.close()
