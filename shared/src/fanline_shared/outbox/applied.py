"""The fan-out worker's side of ``FANLINE_OUTBOX_ACK=applied`` (see the
package docstring)."""

from __future__ import annotations

import uuid

from ..errors import DomainError
from ..events import Event, TweetCreated, TweetDeleted
from ..http_client import PeerClient
from ..logs import get_logger
from .client import outbox_ack

log = get_logger(__name__)


def event_source(event: Event) -> str:
    """The service whose outbox holds ``event``."""
    return "tweet-store" if isinstance(event, TweetCreated | TweetDeleted) else "social-graph"


class AppliedAcks:
    """The fan-out worker's side of ``FANLINE_OUTBOX_ACK=applied``: delete
    each event's outbox row once the event has been applied (or
    dead-lettered). An ack that fails is kept for the next flush; one that is
    lost (the worker dies first) only means the event is replayed and applied
    again at the next start, which is idempotent."""

    MAX_HELD = 100_000  # never grow without bound while an owner is down

    def __init__(self, sources: dict[str, PeerClient]) -> None:
        self._sources = sources
        self._held: dict[str, list[uuid.UUID]] = {name: [] for name in sources}

    def applied(self, event: Event) -> None:
        held = self._held[event_source(event)]
        if len(held) < self.MAX_HELD:
            held.append(event.event_id)

    async def flush(self) -> None:
        for name, client in self._sources.items():
            ids, self._held[name] = self._held[name], []
            if not ids:
                continue
            try:
                await outbox_ack(client, ids)
            except DomainError as exc:
                log.warning("outbox ack of %d applied events to %s failed: %s", len(ids), name, exc)
                self._held[name] = ids + self._held[name]
