"""The outbox port: events waiting to be published, and the relay's lease.

Implemented by every owning service's storage (``fanline_shared.sqlite``,
``fanline_shared.cassandra.outbox``) and checked by one contract suite
(``tests/contract/test_outbox.py``, ``test_relay_lease.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from ..domain import OutboxEvent


class RelayLease(Protocol):
    """Which outbox relay may publish this outbox's stale events: one holder
    at a time, for a bounded time, so that N gateway replicas do not publish
    N copies of every event after an outage (issue 14, 3(e)).

    The lease expires by itself ``ttl_s`` after it was last taken or renewed
    (the storage's clock: a Cassandra TTL, SQLite's owning process), so a
    holder that dies is replaced; a holder must stop relaying before its
    own ``ttl_s`` has passed since it *asked* for the lease."""

    async def acquire_lease(self, holder: str, ttl_s: int) -> bool:
        """Take the lease if it is free or expired, or renew it if ``holder``
        has it; True if ``holder`` holds it for the next ``ttl_s`` seconds.
        Of concurrent callers at most one gets True."""

    async def release_lease(self, holder: str) -> None:
        """Give the lease up if ``holder`` has it (a standby takes over at its
        next try instead of after the TTL); otherwise change nothing."""


class Outbox(RelayLease, Protocol):
    """Events waiting to be published (one per owning service), and the
    lease of the relay that publishes them."""

    async def pending(self, older_than: datetime, limit: int) -> list[OutboxEvent]:
        """Unacknowledged events created before ``older_than``, oldest first."""

    async def ack(self, event_ids: Sequence[uuid.UUID]) -> None:
        """Forget published events. Unknown ids are ignored."""


class AppliedAckOutbox(Outbox, Protocol):
    """An outbox that can keep events until the fan-out worker applied them
    (the embedded default, whose broker forgets everything when it stops).

    In this mode a published event is only *marked* published (``pending``
    no longer returns it); the worker ``ack``s it once applied; ``replay``
    makes every published-but-unapplied event pending again, so it is
    published anew — run at start, when the embedded broker may have lost
    it. Only the SQLite adapter implements it (see docs/architecture.md)."""

    async def mark_published(self, event_ids: Sequence[uuid.UUID]) -> None:
        """Stop returning these events from ``pending``; unknown ids ignored."""

    async def replay(self) -> int:
        """Make every published, unacknowledged event pending again; return
        how many."""
