"""Calls to an owner's internal outbox API (``routes.py``), over its peer client."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from ..domain import OutboxEvent
from ..errors import NotFound
from ..http_client import PeerClient
from .wire import event_from_json


async def outbox_pending(client: PeerClient, older_than_ms: int, limit: int) -> list[OutboxEvent]:
    body = await client.call(
        "GET", "/internal/outbox", operation="outbox_pending", params={"older_than_ms": older_than_ms, "limit": limit}
    )
    return [event_from_json(item) for item in body["items"]]


async def outbox_ack(client: PeerClient, ids: Sequence[uuid.UUID]) -> None:
    await client.call("POST", "/internal/outbox/ack", operation="outbox_ack", json={"ids": [str(i) for i in ids]})


async def outbox_acquire_lease(client: PeerClient, holder: str, ttl_s: int) -> bool:
    """Take or renew the relay lease of ``client``'s outbox. An owner that
    predates leases (404 during a rolling upgrade) counts as held: every
    relay publishes then, as before."""
    try:
        body = await client.call(
            "POST", "/internal/outbox/lease", operation="outbox_lease", json={"holder": holder, "ttl_s": ttl_s}, policy=None
        )
    except NotFound:
        return True
    return bool(body["held"])


async def outbox_release_lease(client: PeerClient, holder: str) -> None:
    await client.call(
        "DELETE", "/internal/outbox/lease", operation="outbox_lease_release", params={"holder": holder}, policy=None
    )


async def outbox_mark_published(client: PeerClient, ids: list[uuid.UUID]) -> None:
    await client.call(
        "POST", "/internal/outbox/published", operation="outbox_mark_published", json={"ids": [str(i) for i in ids]}
    )


async def outbox_replay(client: PeerClient) -> int:
    body = await client.call("POST", "/internal/outbox/replay", operation="outbox_replay")
    return int(body["replayed"])
