"""The transactional outbox: how a 201 becomes a guaranteed fan-out.

1. The owning service (tweet-store, social-graph) writes the state change and
   its event in one atomic write (``ports.Outbox``).
2. The gateway publishes that event at once (the fast path) and remembers its
   id; a background ``OutboxRelay`` acknowledges published ids in batches.
3. The same relay sweeps every owner's outbox for events older than a few
   seconds that nobody acknowledged — the broker was down, or a gateway died
   between the write and the publish — publishes them and acknowledges them.

Events may therefore be published more than once; the worker is idempotent and
checks current state, so that is harmless. See docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from datetime import timedelta

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import metrics
from .domain import utcnow
from .errors import BadRequest, DomainError
from .kafka import EventPublisher
from .peers import PeerClient, event_to_json, outbox_ack, outbox_pending
from .policies import RELAY_BACKOFF
from .ports import Outbox
from .web import json_response, read_json_object, route

log = logging.getLogger(__name__)


def outbox_routes(service: str, get_outbox: Callable[[Request], Outbox]) -> list[Route]:
    """The internal outbox API every owning service serves to the relay."""

    async def pending(request: Request) -> Response:
        try:
            older_than_ms = int(request.query_params.get("older_than_ms", "3000"))
            limit = min(int(request.query_params.get("limit", "500")), 5000)
        except ValueError:
            raise BadRequest("older_than_ms and limit must be integers") from None
        events = await get_outbox(request).pending(utcnow() - timedelta(milliseconds=older_than_ms), limit)
        return json_response({"items": [event_to_json(e) for e in events]})

    async def ack(request: Request) -> Response:
        body = await read_json_object(request, max_bytes=4 * 1024 * 1024)
        try:
            ids = [uuid.UUID(str(i)) for i in body.get("ids", [])]
        except ValueError:
            raise BadRequest("ids must be UUIDs") from None
        await get_outbox(request).ack(ids)
        return Response(status_code=204)

    return [
        route(service, "/internal/outbox", pending, ["GET"]),
        route(service, "/internal/outbox/ack", ack, ["POST"]),
    ]


class OutboxRelay:
    """Background task of the gateway: batch acks and sweep stale events."""

    def __init__(
        self,
        publisher: EventPublisher,
        sources: dict[str, PeerClient],
        *,
        sweep_interval_s: float = 1.0,
        stale_after_ms: int = 3000,
        batch: int = 500,
    ) -> None:
        self._publisher = publisher
        self._sources = sources
        self._interval = sweep_interval_s
        self._stale_after_ms = stale_after_ms
        self._batch = batch
        self._to_ack: dict[str, list[uuid.UUID]] = {name: [] for name in sources}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def published(self, source: str, event_id: uuid.UUID) -> None:
        """The fast path published this event; acknowledge it soon."""
        self._to_ack[source].append(event_id)
        if len(self._to_ack[source]) >= self._batch:
            self._wake.set()

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

    async def flush_acks(self) -> None:
        for name, client in self._sources.items():
            ids, self._to_ack[name] = self._to_ack[name], []
            if not ids:
                continue
            try:
                await outbox_ack(client, ids)
            except DomainError as exc:
                # Not acknowledged: the sweep will republish them, harmlessly.
                log.warning("outbox ack to %s failed: %s", name, exc)

    async def sweep_once(self) -> int:
        """Publish and acknowledge every stale event of every source; return
        how many were published."""
        total = 0
        for name, client in self._sources.items():
            while True:
                events = await outbox_pending(client, self._stale_after_ms, self._batch)
                metrics.OUTBOX_PENDING.labels(name).set(len(events))
                if not events:
                    break
                done = await self._publisher.publish_many(events)
                if done:
                    await outbox_ack(client, [e.id for e in done])
                    metrics.OUTBOX_RELAYED.labels(name).inc(len(done))
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
                await self.flush_acks()
                await self.sweep_once()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the relay must outlive any failure
                failures += 1
                log.warning("outbox relay sweep failed: %s", exc)
                await asyncio.sleep(RELAY_BACKOFF.delay(min(failures, 6)))
