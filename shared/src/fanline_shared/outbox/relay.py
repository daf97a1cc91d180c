"""``OutboxRelay``: the gateway's background task that acknowledges fast-path
publishes and sweeps stale events, one relay per outbox at a time (see the
package docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid

from .. import metrics
from ..domain import timeuuid_time, utcnow
from ..errors import DomainError
from ..http_client import PeerClient
from ..kafka import EventPublisher
from ..logs import get_logger
from ..policies import RELAY_BACKOFF
from .client import (
    outbox_ack,
    outbox_acquire_lease,
    outbox_mark_published,
    outbox_pending,
    outbox_release_lease,
    outbox_replay,
)

log = get_logger(__name__)


# A holder stops sweeping this far into its lease (counted from when it asked
# for it), well before the owner lets the lease lapse.
LEASE_USE = 0.8


def relay_holder() -> str:
    """This relay's name in the lease rows: host, process and a random tag."""
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class OutboxRelay:
    """Background task of the gateway: batch acks and sweep stale events.

    Every ``sweep_interval_s`` it sends the acknowledgements queued by the
    fast path (they must reach the outbox well before ``stale_after_ms``, or
    another replica's sweep would publish those events again). It *reads*
    the outboxes for stale events only every ``read_every_s`` (default three
    intervals), and ``stale_after_ms`` after this gateway's own fast path
    failed: each read costs 2 x 8 statements or more at each owner, most
    sweeps find nothing, and only a gateway that died mid-request leaves
    events nobody knows about (issue 31: the reads were a tenth of the
    Cassandra statements at 60 requests/s).

    ``lease_ttl_s``: sweep a source only while holding its outbox's lease
    (None: always, for a single relay and for tests)."""

    def __init__(
        self,
        publisher: EventPublisher,
        sources: dict[str, PeerClient],
        *,
        sweep_interval_s: float = 1.0,
        stale_after_ms: int = 3000,
        read_every_s: float | None = None,
        batch: int = 500,
        ack_when_applied: bool = False,
        lease_ttl_s: int | None = None,
        holder: str | None = None,
    ) -> None:
        self._publisher = publisher
        self._sources = sources
        self._lease_ttl = lease_ttl_s
        self.holder = holder or relay_holder()
        # Per source: until when (monotonic) this relay may sweep, and when
        # it next asks for (or renews) the lease.
        self._lease_until = dict.fromkeys(sources, 0.0)
        self._lease_next = dict.fromkeys(sources, 0.0)
        self._interval = sweep_interval_s
        self._read_every = read_every_s if read_every_s is not None else 3 * sweep_interval_s
        self._next_read = 0.0  # monotonic time of the next outbox read (0: at the first turn)
        self._stale_after_ms = stale_after_ms
        self._batch = batch
        self._to_ack: dict[str, list[uuid.UUID]] = {name: [] for name in sources}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        # ``applied`` mode: a published row is only marked published (the
        # worker deletes it), and each source is replayed once at start.
        self._applied_mode = ack_when_applied
        self._to_replay = set(sources) if ack_when_applied else set()

    async def _settle(self, client: PeerClient, ids: list[uuid.UUID]) -> None:
        """What "published" means for a row in this mode."""
        if self._applied_mode:
            await outbox_mark_published(client, ids)
        else:
            await outbox_ack(client, ids)

    async def replay_once(self) -> None:
        """``applied`` mode, at start: make every published-but-unapplied
        event pending again — the embedded broker may have lost it."""
        for name in sorted(self._to_replay):
            replayed = await outbox_replay(self._sources[name])
            self._to_replay.discard(name)
            if replayed:
                log.info("replaying %d published but unapplied events of %s", replayed, name)

    def published(self, source: str, event_id: uuid.UUID) -> None:
        """The fast path published this event; acknowledge it soon."""
        self._to_ack[source].append(event_id)
        if len(self._to_ack[source]) >= self._batch:
            self._wake.set()

    def read_soon(self) -> None:
        """This gateway's fast path could not publish an event: read the
        outboxes once it is stale (``stale_after_ms``), not at the next
        regular read."""
        due = time.monotonic() + self._stale_after_ms / 1000
        if due < self._next_read:
            self._next_read = due

    def leads(self, source: str) -> bool:
        """Whether this relay may sweep ``source``'s outbox now."""
        return self._lease_ttl is None or time.monotonic() < self._lease_until[source]

    async def keep_leases(self) -> None:
        """Take or renew each source's lease when due (every third of its
        TTL); a standby asks as often, so it takes over within a third of a
        TTL after the lease lapses or is released."""
        if self._lease_ttl is None:
            return
        for name, client in self._sources.items():
            asked = time.monotonic()
            if asked < self._lease_next[name]:
                continue
            self._lease_next[name] = asked + self._lease_ttl / 3
            was = self.leads(name)
            try:
                held = await outbox_acquire_lease(client, self.holder, self._lease_ttl)
            except DomainError as exc:
                # Unknown outcome: a lease held runs out by itself (sweeps stop
                # at its end); ask again at the next turn.
                log.warning("outbox.lease_failed", source=name, error=exc.message)
                continue
            self._lease_until[name] = asked + self._lease_ttl * LEASE_USE if held else 0.0
            metrics.OUTBOX_RELAY_ACTIVE.labels(name).set(1 if held else 0)
            if held:
                # The gauge drops when the lease ends unrenewed, even while this
                # task is stuck in a slow publish (the loop still runs timers).
                asyncio.get_running_loop().call_later(
                    max(0.0, self._lease_until[name] - time.monotonic()) + 0.01, self._lease_ended, name
                )
            if held != was:
                log.info("outbox.relay_active" if held else "outbox.relay_standby", source=name, holder=self.holder)
            if not held:
                # The active relay reports the backlog; a standby's last values would linger.
                for gauge in (metrics.OUTBOX_PENDING, metrics.OUTBOX_OLDEST_AGE):
                    with contextlib.suppress(KeyError):
                        gauge.remove(name)

    def _lease_ended(self, source: str) -> None:
        if not self.leads(source):
            metrics.OUTBOX_RELAY_ACTIVE.labels(source).set(0)

    async def release_leases(self) -> None:
        """Give up every lease held (at shutdown), so a standby takes over at once."""
        if self._lease_ttl is None:
            return
        for name, client in self._sources.items():
            if not self.leads(name):
                continue
            self._lease_until[name] = 0.0
            metrics.OUTBOX_RELAY_ACTIVE.labels(name).set(0)
            try:
                await outbox_release_lease(client, self.holder)
            except DomainError as exc:
                log.warning("outbox.lease_release_failed", source=name, error=exc.message)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="outbox-relay")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self.flush_acks()
        await self.release_leases()

    async def flush_acks(self) -> None:
        for name, client in self._sources.items():
            ids, self._to_ack[name] = self._to_ack[name], []
            if not ids:
                continue
            try:
                await self._settle(client, ids)
            except DomainError as exc:
                # Not acknowledged: the sweep will republish them, harmlessly.
                log.warning("outbox ack to %s failed: %s", name, exc)

    async def sweep_once(self) -> int:
        """Publish and acknowledge every stale event of every source; return
        how many were published."""
        total = 0
        for name, client in self._sources.items():
            first = True
            while True:
                # Renewed (when due) and checked before each batch: with the
                # broker down a batch can take the Kafka timeout, and a lease
                # may end mid-sweep.
                await self.keep_leases()
                if not self.leads(name):
                    break
                events = await outbox_pending(client, self._stale_after_ms, self._batch)
                metrics.OUTBOX_PENDING.labels(name).set(len(events))
                if first:
                    # Oldest first: how long the oldest waiting event has waited.
                    oldest = (utcnow() - timeuuid_time(events[0].id)).total_seconds() if events else 0.0
                    metrics.OUTBOX_OLDEST_AGE.labels(name).set(max(0.0, oldest))
                    first = False
                if not events:
                    break
                done = await self._publisher.publish_many(events)
                if done:
                    await self._settle(client, [e.id for e in done])
                    metrics.OUTBOX_RELAYED.labels(name).inc(len(done))
                    # One line per batch; the request ids make each event's step findable.
                    log.info(
                        "outbox.relayed",
                        source=name,
                        events=len(done),
                        event_ids=[str(e.id) for e in done],
                        request_ids=sorted({e.request_id for e in done if e.request_id}),
                    )
                    total += len(done)
                if len(done) < len(events) or len(events) < self._batch:
                    break
        return total

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self._interval)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.replay_once()
                await self.flush_acks()
                await self.keep_leases()
                if (now := time.monotonic()) >= self._next_read:
                    self._next_read = now + self._read_every
                    await self.sweep_once()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the relay must outlive any failure
                failures += 1
                log.warning("outbox relay sweep failed: %s", exc)
                await asyncio.sleep(RELAY_BACKOFF.delay(min(failures, 6)))
