"""The Mastodon home timeline keeps /v1's guarantees (one service layer):
large accounts merged at read time and paged both ways past the stored
rows, and a returning user's timeline regenerated behind a 206. On both
backends' session systems with small thresholds (``small_system``,
``inactive_system``: the ones test_large_accounts.py and
test_inactive_users.py use through /v1), so the ascending reads behind
``min_id`` run against Cassandra too."""

from __future__ import annotations

import time
from typing import Any

import pytest

from .client import Api, eventually
from .masto import raw

pytestmark = pytest.mark.e2e


def home(url: str, token: str, **params: Any) -> tuple[int, list[int], dict[str, str]]:
    with raw(url, token) as http:
        response = http.get("/api/v1/timelines/home", params=params)
    assert response.status_code in (200, 206), response.text
    return response.status_code, [int(s["id"]) for s in response.json()], dict(response.headers)


def test_large_accounts_and_trimmed_rows_page_both_ways(small_system: Any) -> None:
    """FANLINE_LARGE_ACCOUNT_FOLLOWERS=3, FANLINE_HOME_MAX_ROWS=10: a large
    account's statuses are merged at read time, the stored rows are trimmed
    and the older ones read from the userlines — in both directions."""
    url = small_system.url()
    api = Api(url)
    try:
        reader, reader_token = api.user("rd")
        big, big_token = api.user("bg")
        small, small_token = api.user("sm")
        for target in (big, small):
            api.follow(reader_token, reader, target)
        for _ in range(3):
            fan, fan_token = api.user("f")
            api.follow(fan_token, fan, big)
        for n in range(24):  # 16 by the small author: past the 10 stored rows
            api.post(big_token if n % 3 == 0 else small_token, f"status {n}")
        want = 24
        eventually(lambda: len(home(url, reader_token, limit=40)[1]) >= want, timeout=30, what="the fan-out")
        _, everything, _ = home(url, reader_token, limit=40)
        assert everything == sorted(everything, reverse=True) and len(everything) == want
        # Backward, 3 at a time, with max_id.
        backward: list[int] = []
        params: dict[str, Any] = {"limit": 3}
        while True:
            _, page, _ = home(url, reader_token, **params)
            if not page:
                break
            backward += page
            params = {"limit": 3, "max_id": page[-1]}
        # Forward, 3 at a time, with min_id from below the oldest.
        forward: list[int] = []
        params = {"limit": 3, "min_id": everything[-1] - 1}
        while True:
            _, page, _ = home(url, reader_token, **params)
            if not page:
                break
            assert page == sorted(page, reverse=True)
            forward = page + forward
            params = {"limit": 3, "min_id": page[0]}
        assert backward == everything and forward == everything
    finally:
        api.close()


def test_a_returning_user_gets_206_then_the_whole_timeline(inactive_system: Any) -> None:
    """FANLINE_INACTIVE_AFTER_S=3: back after being away, the first read of
    the home timeline starts its regeneration and answers 206 with
    Retry-After, as Mastodon's HomeFeed#regenerating? does."""
    url = inactive_system.url()
    api = Api(url)
    try:
        author, author_token = api.user("au")
        away, away_token = api.user("aw")
        api.follow(away_token, away, author)
        first = api.post(author_token, "before you left")["id"]
        eventually(lambda: first in api.home_ids(away_token))
        time.sleep(4.5)  # no request: inactive now
        for n in range(3):
            api.post(author_token, f"while away {n}")
        status, items, headers = home(url, away_token, limit=40)
        assert status == 206 and int(headers["retry-after"]) >= 1
        eventually(lambda: home(url, away_token, limit=40)[0] == 200, timeout=30, what="regenerated")
        _, items, _ = home(url, away_token, limit=40)
        assert len(items) == 4 and items == sorted(items, reverse=True)
    finally:
        api.close()
