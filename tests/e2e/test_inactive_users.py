"""api.md "Inactive users": skipped by fan-out, regenerated on return (206 +
Retry-After while it runs), and the regenerated timeline is the one the user
would have had. Both backends; users are inactive after 3 s (``INACTIVE_ENV``)."""

from __future__ import annotations

import time

import httpx

from deploy.local.system import System

from .client import Api, eventually
from .test_large_accounts import metric

INACTIVE_AFTER_S = 3.0


def stored_home(system: System, owner: str) -> list[str]:
    """The home rows tweet-store has stored (not the merged read): what the
    fan-out wrote. Read through the internal route, as the gateway does."""
    r = httpx.get(
        f"{system.url('tweet-store')}/internal/home/{owner}", params={"limit": 100}, timeout=10, headers=system.internal_headers()
    )
    assert r.status_code == 200, r.text
    return [t["id"] for t in r.json()["items"]]


def test_an_inactive_user_is_skipped_then_regenerated_on_return(inactive_system: System) -> None:
    api = Api(inactive_system.url())
    try:
        author, author_token = api.user("au")
        big, big_token = api.user("bg")
        away, away_token = api.user("aw")
        twin, twin_token = api.user("tw")  # follows the same, stays active
        for name, token in ((away, away_token), (twin, twin_token)):
            api.follow(token, name, author)
            api.follow(token, name, big)
        for _ in range(3):  # big becomes a large account (3 followers)
            fan, fan_token = api.user("f")
            api.follow(fan_token, fan, big)
        before = api.post(author_token, "before you left")["id"]
        eventually(lambda: before in api.home_ids(away_token))
        # away makes no request and becomes inactive; the twin keeps reading.
        deadline = time.monotonic() + INACTIVE_AFTER_S + 1.5
        while time.monotonic() < deadline:
            assert api.request("GET", "/v1/timeline", twin_token).status_code == 200
            time.sleep(0.3)
        missed = [api.post(author_token, f"while away {n}")["id"] for n in range(4)]
        missed_big = api.post(big_token, "large account while away")["id"]
        # The twin keeps reading: active, so its rows are written.
        eventually(lambda: all(i in api.home_ids(twin_token) for i in [*missed, missed_big]), what="twin")
        skipped_rows = stored_home(inactive_system, away)
        assert not set(missed) & set(skipped_rows), "the fan-out wrote rows for an inactive user"

        first = api.request("GET", "/v1/timeline", away_token, params={"limit": 100})
        assert first.status_code == 206, first.text
        assert int(first.headers["Retry-After"]) >= 1
        assert set(first.json()) == {"items", "next_cursor"}

        def complete() -> bool:
            r = api.request("GET", "/v1/timeline", away_token, params={"limit": 100})
            assert r.status_code in (200, 206), r.text
            return r.status_code == 200

        eventually(complete, timeout=30, what="regeneration finished")
        expected = [missed_big, *reversed(missed), before]
        ids = api.home_ids(away_token)
        assert ids == [i for i in api.home_ids(twin_token) if i in ids]
        assert [i for i in ids if i in expected] == expected
        assert metric(inactive_system, "tweet-store", "fanline_home_regenerations_total", 'outcome="done"') >= 1
        # Back and active: later tweets are fanned out to them again.
        again = api.post(author_token, "welcome back")["id"]

        def fanned_out_again() -> bool:
            # Reading meanwhile, as a user who is back does: with only the rows polled,
            # a fan-out slower than INACTIVE_AFTER_S on a busy machine (CI) let the
            # user age into inactivity again before the last read (a 206).
            assert api.request("GET", "/v1/timeline", away_token).status_code == 200
            return again in stored_home(inactive_system, away)

        eventually(fanned_out_again, interval=0.3, what="fanned out again")
    finally:
        api.close()


def test_an_active_user_never_sees_206(inactive_system: System) -> None:
    api = Api(inactive_system.url())
    try:
        author, author_token = api.user("au")
        reader, token = api.user("rd")
        api.follow(token, reader, author)
        deadline = time.monotonic() + INACTIVE_AFTER_S * 2
        while time.monotonic() < deadline:
            api.post(author_token, "tick")
            assert api.request("GET", "/v1/timeline", token).status_code == 200
            time.sleep(0.5)
    finally:
        api.close()
