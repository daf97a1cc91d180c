"""api.md "Large accounts, inactive users, bounded storage", end to end on both
backends with the small thresholds of ``SMALL_ENV`` (large at 3 followers,
10 stored rows per home timeline).

A client cannot tell a large account from any other author: these tests check
exactly that through the public API, and check through the services' own
metrics that the large-account path and the cap were really taken.
"""

from __future__ import annotations

import re

import httpx

from deploy.local.system import System

from .client import Api, eventually


def metric(system: System, service: str, name: str, labels: str = "") -> float:
    """The sum of a metric's samples on one service (``labels`` must appear in them)."""
    text = httpx.get(system.metrics_url(service), timeout=10).text
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", line)
        if m and labels in (m.group(1) or ""):
            total += float(m.group(2))
    return total


def home(api: Api, token: str, limit: int = 100) -> list[str]:
    return [t["id"] for t in api.all_items("/v1/timeline", token, limit=limit)]


def followers(api: Api, author: str, count: int, prefix: str = "f") -> list[tuple[str, str]]:
    users = [api.user(prefix) for _ in range(count)]
    for name, token in users:
        api.follow(token, name, author)
    return users


def test_a_large_accounts_tweets_reach_every_follower_without_fan_out(small_api: Api, small_system: System) -> None:
    api = small_api
    author, author_token = api.user("big")
    fans = followers(api, author, 4)
    skipped = metric(small_system, "fanout-worker", "fanline_fanout_skipped_large_total")
    tweet = api.post(author_token, "to the many")
    for _name, token in fans:
        eventually(lambda token=token: tweet["id"] in home(api, token), what="large account's tweet merged")
    eventually(lambda: tweet["id"] in home(api, author_token), what="in the author's own home")
    # Merged at read time, not written per follower.
    assert metric(small_system, "fanout-worker", "fanline_fanout_skipped_large_total") >= skipped + 1
    # Delete: gone from every follower's home.
    assert api.request("DELETE", f"/v1/tweets/{tweet['id']}", author_token).status_code == 204
    for _name, token in fans:
        eventually(lambda token=token: tweet["id"] not in home(api, token), what="deleted tweet gone")


def test_unfollowing_a_large_account_removes_its_tweets(small_api: Api) -> None:
    api = small_api
    author, author_token = api.user("big")
    fans = followers(api, author, 3)
    tweet = api.post(author_token, "hello followers")
    name, token = fans[0]
    eventually(lambda: tweet["id"] in home(api, token))
    api.unfollow(token, name, author)
    eventually(lambda: tweet["id"] not in home(api, token), what="unfollowed large account gone")
    for _name, other in fans[1:]:
        assert tweet["id"] in home(api, other)


def test_crossing_the_threshold_either_way_loses_duplicates_and_reorders_nothing(small_api: Api) -> None:
    api = small_api
    author, author_token = api.user("grow")
    fans = followers(api, author, 2)  # small: fanned out on write
    small_1 = api.post(author_token, "while small")["id"]
    for _name, token in fans:
        eventually(lambda token=token: small_1 in home(api, token))
    fans += followers(api, author, 1)  # 3 followers: large
    large_1 = api.post(author_token, "while large")["id"]
    large_2 = api.post(author_token, "still large")["id"]
    gone, gone_token = fans[1]
    api.unfollow(gone_token, gone, author)  # 2 followers: small again
    small_2 = api.post(author_token, "small again")["id"]
    expected = [small_2, large_2, large_1, small_1]
    for _name, token in (fans[0], fans[2]):
        eventually(
            lambda token=token: [i for i in home(api, token) if i in expected] == expected,
            what="every tweet once, newest first, across both crossings",
        )
    eventually(lambda: not set(expected) & set(home(api, gone_token)), what="the unfollower sees none of them")
    eventually(lambda: [i for i in home(api, author_token) if i in expected] == expected)


def test_paging_past_the_stored_cap_yields_everything_once_in_order(small_api: Api, small_system: System) -> None:
    api = small_api
    reader, reader_token = api.user("rd")
    authors = [api.user("au") for _ in range(2)]
    for name, _ in authors:
        api.follow(reader_token, reader, name)
    posted = []
    for n in range(12):
        name, token = authors[n % 2]
        posted.append(api.post(token, f"tweet {n}")["id"])
    own = api.post(reader_token, "mine")["id"]
    expected = [own, *reversed(posted)]
    eventually(lambda: home(api, reader_token, limit=100) == expected, what="all 13 in the home timeline")
    # The cap has trimmed the stored rows (10): the rest is read from userlines.
    eventually(
        lambda: metric(small_system, "tweet-store", "fanline_home_trims_total", 'outcome="trimmed"') > 0, what="a trim happened"
    )
    for limit in (1, 3, 4, 10, 11):
        assert home(api, reader_token, limit=limit) == expected, limit


def test_a_new_follower_of_a_large_account_sees_its_recent_tweets(small_api: Api) -> None:
    api = small_api
    author, author_token = api.user("big")
    followers(api, author, 3)
    tweets = [api.post(author_token, f"n{n}")["id"] for n in range(3)]
    name, token = api.user("late")
    api.follow(token, name, author)
    eventually(lambda: home(api, token)[:3] == list(reversed(tweets)), what="follow merge of a large account")
