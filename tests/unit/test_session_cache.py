"""The gateway's cache of verified sessions (``fanline_api.sessions``): what
it reuses, for how long, and everything that makes it ask social-graph
again. The lookup is a fake that counts calls; tests/e2e/test_session_cache.py
checks revocation across two real gateways."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fanline_api.cursors import CursorCodec
from fanline_api.gateway import Gateway
from fanline_api.sessions import SessionCache
from fanline_shared import events
from fanline_shared.domain import to_rfc3339
from fanline_shared.errors import Unauthorized
from fanline_shared.outbox.wire import event_to_json

WALL = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class SocialGraph:
    """Answers like social-graph's session lookup; counts the calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.live: dict[str, dict[str, Any]] = {}
        self.gate: asyncio.Event | None = None

    def add(self, token: str, username: str, **extra: Any) -> None:
        self.live[token] = {"username": username, "returned_at": None, **extra}

    async def grant(self, token: str) -> dict[str, Any]:
        self.calls.append(token)
        if self.gate is not None:
            await self.gate.wait()
        if token not in self.live:
            raise Unauthorized("invalid, expired or revoked token", code="unauthorized")
        return dict(self.live[token])

    async def logout(self, token: str) -> dict[str, Any]:
        username = self.live.pop(token)["username"]
        return {"event": event_to_json(events.session_revoked(username))}


def cache(social: SocialGraph, clock: Clock, max_age_s: float = 60.0, **kw: Any) -> SessionCache:
    sessions = SessionCache(social.grant, max_age_s, clock=clock, **kw)
    sessions.connected()
    return sessions


async def test_a_verified_token_is_reused_until_its_max_age() -> None:
    social, clock = SocialGraph(), Clock()
    social.add("t1", "Ada")
    sessions = cache(social, clock, 60)
    assert (await sessions.lookup("t1"))["username"] == "Ada"
    assert (await sessions.lookup("t1"))["username"] == "Ada"
    assert social.calls == ["t1"]
    clock.now += 59
    await sessions.lookup("t1")
    assert social.calls == ["t1"]
    clock.now += 2
    await sessions.lookup("t1")
    assert social.calls == ["t1", "t1"]


@pytest.mark.parametrize(
    ("extra", "reused_for_s"),
    [
        ({"cache_s": 5.0}, 5),  # social-graph's activity refresh period
        ({"expires_at": to_rfc3339(WALL + timedelta(seconds=8))}, 8),  # never past the session's end
        ({"cache_s": 0}, 0),
    ],
    ids=["cache_s", "expires_at", "cache_s-zero"],
)
async def test_the_answer_bounds_how_long_it_is_reused(extra: dict[str, Any], reused_for_s: float) -> None:
    social, clock = SocialGraph(), Clock()
    social.add("t1", "ada", **extra)
    sessions = cache(social, clock, 60, wall=lambda: WALL.timestamp())
    await sessions.lookup("t1")
    clock.now += reused_for_s - 1
    await sessions.lookup("t1")
    expected = 1 if reused_for_s > 1 else 2
    assert len(social.calls) == expected
    clock.now += 2
    await sessions.lookup("t1")
    assert len(social.calls) == expected + 1


async def test_nothing_is_reused_before_the_tap_connects_or_after_it_disconnects() -> None:
    social, clock = SocialGraph(), Clock()
    social.add("t1", "ada")
    sessions = SessionCache(social.grant, 60, clock=clock)
    await sessions.lookup("t1")
    await sessions.lookup("t1")
    assert len(social.calls) == 2  # revocations cannot reach it yet
    sessions.connected()
    await sessions.lookup("t1")
    await sessions.lookup("t1")
    assert len(social.calls) == 3
    sessions.disconnected()
    assert len(sessions) == 0
    await sessions.lookup("t1")
    assert len(social.calls) == 4


async def test_a_revocation_event_evicts_every_token_of_the_user() -> None:
    social, clock = SocialGraph(), Clock()
    for token, user in (("a1", "Ada"), ("a2", "ada"), ("b1", "bob")):
        social.add(token, user)
    sessions = cache(social, clock)
    for token in ("a1", "a2", "b1"):
        await sessions.lookup(token)
    sessions.revoked("ADA")  # names are case-insensitive
    del social.live["a1"]
    with pytest.raises(Unauthorized):
        await sessions.lookup("a1")
    await sessions.lookup("a2")  # asked again, still live
    await sessions.lookup("b1")  # untouched
    assert social.calls == ["a1", "a2", "b1", "a1", "a2"]


async def test_a_lookup_racing_a_revocation_is_answered_but_not_kept() -> None:
    social, clock = SocialGraph(), Clock()
    social.add("t1", "ada")
    sessions = cache(social, clock)
    social.gate = asyncio.Event()
    pending = asyncio.create_task(sessions.lookup("t1"))
    await asyncio.sleep(0)
    sessions.revoked("someone-else")  # any revocation: its answer may predate it
    social.gate.set()
    assert (await pending)["username"] == "ada"
    assert not sessions.has("t1")


async def test_refusals_are_never_kept_and_the_cache_is_bounded() -> None:
    social, clock = SocialGraph(), Clock()
    sessions = cache(social, clock, size=2)
    for _ in range(2):
        with pytest.raises(Unauthorized):
            await sessions.lookup("nope")
    assert social.calls == ["nope", "nope"]
    for token in ("t1", "t2", "t3"):
        social.add(token, token)
        await sessions.lookup(token)
    assert len(sessions) <= 2


async def test_max_age_zero_turns_it_off() -> None:
    social, clock = SocialGraph(), Clock()
    social.add("t1", "ada")
    sessions = cache(social, clock, 0)
    await sessions.lookup("t1")
    await sessions.lookup("t1")
    assert len(social.calls) == 2 and not sessions.enabled


class Publisher:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def publish(self, event: Any) -> bool:
        self.sent.append(event)
        return True


class Relay:
    def published(self, source: str, event_id: Any) -> None:
        pass


async def test_logging_out_refuses_the_token_here_at_once_and_announces_it() -> None:
    social, clock, publisher = SocialGraph(), Clock(), Publisher()
    social.add("ada.secret", "ada")
    sessions = cache(social, clock)
    g = Gateway(social, None, publisher, Relay(), CursorCodec(b"s" * 32), sessions=sessions)  # type: ignore[arg-type]
    assert await g.authenticate("Bearer ada.secret") == "ada"
    assert await g.session("Bearer ada.secret") == ("ada", None)
    assert social.calls == ["ada.secret"]
    await g.logout("Bearer ada.secret")
    await g.drain(1)
    with pytest.raises(Unauthorized):
        await g.authenticate("Bearer ada.secret")
    [event] = publisher.sent
    decoded = events.decode(event.payload)
    assert isinstance(decoded, events.SessionRevoked) and decoded.data.username == "ada" and event.key == "ada"
