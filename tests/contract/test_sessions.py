"""Contract of ``SessionRepository`` (social-graph), run against every adapter."""

from __future__ import annotations

import asyncio
import secrets
from datetime import timedelta

import pytest

from fanline_shared import events
from fanline_shared.domain import Session, utcnow
from fanline_social_graph.adapters import SocialGraphStorage

from .support import Names


def token() -> str:
    return secrets.token_hex(32)


def ms(value):  # type: ignore[no-untyped-def]
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


async def test_create_then_get(social_graph: SocialGraphStorage, names: Names) -> None:
    t, name = token(), names.user("Se")
    expires_at = utcnow() + timedelta(hours=1)
    await social_graph.sessions.create(t, name, expires_at)
    assert await social_graph.sessions.get(t) == Session(username=name, expires_at=ms(expires_at))


async def test_unknown_token_is_none(social_graph: SocialGraphStorage) -> None:
    assert await social_graph.sessions.get(token()) is None


@pytest.mark.parametrize(
    "offset",
    [timedelta(seconds=-1), timedelta(hours=-5), timedelta(days=-400)],
    ids=["one-second-ago", "hours-ago", "last-year"],
)
async def test_session_expiring_in_the_past_is_none(social_graph: SocialGraphStorage, names: Names, offset: timedelta) -> None:
    t = token()
    await social_graph.sessions.create(t, names.user(), utcnow() + offset)
    assert await social_graph.sessions.get(t) is None


async def test_session_stops_working_when_it_expires(social_graph: SocialGraphStorage, names: Names) -> None:
    t = token()
    await social_graph.sessions.create(t, names.user(), utcnow() + timedelta(seconds=1.5))
    assert await social_graph.sessions.get(t) is not None
    await asyncio.sleep(1.7)
    assert await social_graph.sessions.get(t) is None


async def test_revoke_makes_token_unusable_at_once(social_graph: SocialGraphStorage, names: Names) -> None:
    keep, drop = token(), token()
    name = names.user()
    for t in (keep, drop):
        await social_graph.sessions.create(t, name, utcnow() + timedelta(hours=1))
    await social_graph.sessions.revoke(drop)
    assert await social_graph.sessions.get(drop) is None
    assert await social_graph.sessions.get(keep) is not None
    await social_graph.sessions.revoke(drop)  # twice: fine


async def test_revoking_unknown_token_is_ignored(social_graph: SocialGraphStorage) -> None:
    await social_graph.sessions.revoke(token())


async def test_revoke_stores_its_event_in_the_outbox(social_graph: SocialGraphStorage, names: Names) -> None:
    """The SessionRevoked event that tells the gateways to drop their cached
    verifications is in the outbox once the token is refused."""
    t, name = token(), names.user()
    await social_graph.sessions.create(t, name, utcnow() + timedelta(hours=1))
    event = events.session_revoked(name)
    await social_graph.sessions.revoke(t, event)
    assert await social_graph.sessions.get(t) is None
    pending = await social_graph.outbox.pending(utcnow() + timedelta(seconds=1), 10_000)
    assert event.id in {e.id for e in pending}
    await social_graph.outbox.ack([event.id])
