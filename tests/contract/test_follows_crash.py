"""A follow or unfollow that dies between its edge write (the LWT on
``following``) and its dependent rows must still leave its event in the
outbox, and applying that event repairs the reverse row (issue 14). On
Cassandra these are separate writes (an LWT cannot share a batch with other
partitions); before the fix the event was written *after* the LWT, so a
crash there left a stored edge with no event, and the ``followers`` row that
fan-out reads missing (follow) or stale (unfollow) for good. SQLite commits
all of it in one transaction, so only the repair contract applies there."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fanline_shared import events
from fanline_shared.domain import utcnow
from fanline_shared.errors import Unavailable
from fanline_social_graph.adapters import SocialGraphStorage

from .conftest import Backend
from .support import Names


def die_after_the_edge(monkeypatch: pytest.MonkeyPatch, backend: Backend, storage: SocialGraphStorage) -> None:
    """The process dies right after the LWT: the dependent writes never happen."""
    if backend.name != "cassandra":
        return

    async def died(*_args: object, **_kw: object) -> None:
        raise Unavailable("the process died here")

    monkeypatch.setattr(storage.follows, "_write", died)


async def pending_ids(storage: SocialGraphStorage) -> set[object]:
    return {e.id for e in await storage.outbox.pending(utcnow() + timedelta(seconds=1), 100_000)}


async def test_follow_dying_after_its_edge_has_its_event_and_the_event_repairs_it(
    backend: Backend, social_graph: SocialGraphStorage, names: Names, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = names.user("Ca"), names.user("Cb")
    event = events.followed(a, b)
    die_after_the_edge(monkeypatch, backend, social_graph)
    try:
        await social_graph.follows.follow(a, b, utcnow(), event)
    except Unavailable:
        pass
    monkeypatch.undo()
    assert await social_graph.follows.is_following(a, b)
    assert event.id in await pending_ids(social_graph), "a stored follow without its event"
    # What the worker does when it applies the event:
    assert await social_graph.follows.reconcile(a, b) is True
    assert [e.username for e in await social_graph.follows.followers(b, 10, None)] == [a]
    assert await social_graph.follows.reconcile(a, b) is True  # idempotent
    await social_graph.outbox.ack([event.id])


async def test_unfollow_dying_after_its_edge_has_its_event_and_the_event_repairs_it(
    backend: Backend, social_graph: SocialGraphStorage, names: Names, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = names.user("Ua"), names.user("Ub")
    assert await social_graph.follows.follow(a, b, utcnow(), events.followed(a, b))
    event = events.unfollowed(a, b)
    die_after_the_edge(monkeypatch, backend, social_graph)
    try:
        await social_graph.follows.unfollow(a, b, event)
    except Unavailable:
        pass
    monkeypatch.undo()
    assert not await social_graph.follows.is_following(a, b)
    assert event.id in await pending_ids(social_graph), "a stored unfollow without its event"
    assert await social_graph.follows.reconcile(a, b) is False
    assert await social_graph.follows.followers(b, 10, None) == []


async def test_reconcile_of_a_pair_that_never_followed(social_graph: SocialGraphStorage, names: Names) -> None:
    a, b = names.user("Na"), names.user("Nb")
    assert await social_graph.follows.reconcile(a, b) is False
    assert await social_graph.follows.followers(b, 10, None) == []
