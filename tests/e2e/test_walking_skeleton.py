"""The walking skeleton: sign up → log in → follow → post → fan-out → read,
through every service, on the embedded default and on real Cassandra + Kafka."""

from __future__ import annotations

import httpx

from .client import Api, eventually


def test_post_reaches_followers_home_timeline(api: Api) -> None:
    author, author_token = api.user("a")
    follower, follower_token = api.user("f")
    api.follow(follower_token, follower, author)

    tweet = api.post(author_token, "hello, fan-out")

    assert tweet["username"] == author and tweet["body"] == "hello, fan-out"
    eventually(lambda: tweet["id"] in api.home_ids(follower_token), what="tweet in follower's home timeline")
    eventually(lambda: tweet["id"] in api.home_ids(author_token), what="tweet in author's own home timeline")
    # The userline and the public timeline have it at once.
    assert tweet["id"] in [t["id"] for t in api.page(f"/v1/users/{author}/tweets")["items"]]
    assert tweet["id"] in [t["id"] for t in api.page("/v1/public", limit=100)["items"]]


def test_every_service_is_healthy_ready_and_exports_metrics(system) -> None:  # type: ignore[no-untyped-def]
    for name in ("api", "social-graph", "tweet-store", "fanout-worker"):
        base = system.url(name)
        assert httpx.get(base + "/healthz").status_code == 200, name
        assert httpx.get(base + "/readyz").status_code == 200, name
        metrics = httpx.get(system.metrics_url(name))
        assert metrics.status_code == 200, name
        assert "fanline_build_info" in metrics.text, name
        # Only on the metrics port: the service's own port (the gateway's is
        # the public one) does not serve them (issue #29 item 6).
        assert httpx.get(base + "/metrics").status_code == 404, name
