"""One event's processing: decode, apply through the handlers, retry, or
dead-letter. ``process`` never raises into faust (see ``app.py``'s delivery
guarantees): transient failures are retried for as long as it takes, anything
that can never succeed goes to the dead-letter topic with its error."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from structlog.contextvars import bound_contextvars

from fanline_shared import events, metrics
from fanline_shared.errors import DomainError, PeerFailed, Unavailable
from fanline_shared.logs import KAFKA_REQUEST_ID_HEADER, current_request_id, get_logger
from fanline_shared.policies import FANOUT_TRANSIENT, RetryPolicy, retry

from .handlers import FanoutHandlers

log = get_logger(__name__)


class _Deterministic(Exception):
    """Carries a ``PeerFailed`` past the transient retry (which retries every
    ``Unavailable``) to the bounded one."""

    def __init__(self, error: PeerFailed) -> None:
        super().__init__(str(error))
        self.error = error


class Processor:
    """Turns one raw message into handler calls, retries or a dead letter."""

    def __init__(self, handlers: FanoutHandlers, dead_letter: Any, max_attempts: int) -> None:
        self._handlers = handlers
        self._dead_letter = dead_letter
        self._unexpected = RetryPolicy("fanout_unexpected", attempts=max_attempts, base_delay_s=0.2, max_delay_s=2.0)

    async def process(self, key: bytes | None, value: bytes, origin: dict[str, str]) -> events.Event | None:
        """Apply the event or dead-letter it; return it once it is settled
        (None if it could not even be decoded)."""
        try:
            event = events.decode(value)
        except events.InvalidEvent as exc:
            metrics.EVENTS_CONSUMED.labels("invalid", "dead_lettered").inc()
            await self._to_dead_letter(key, value, "invalid_event", str(exc), origin)
            return None
        kind = event.type
        with bound_contextvars(event_type=kind, event_id=str(event.event_id)):
            return await self._process(event, key, value, origin)

    async def _process(self, event: events.Event, key: bytes | None, value: bytes, origin: dict[str, str]) -> events.Event | None:
        kind = event.type
        started = time.perf_counter()

        def count_retry(_attempt: int, exc: BaseException) -> None:
            metrics.EVENT_RETRIES.labels(kind).inc()
            log.warning("event.retrying", error=str(exc) or type(exc).__name__)

        async def apply_once() -> None:
            try:
                await self._handlers.apply(event)
            except PeerFailed as exc:
                # Not transient (a peer's 500): out of the endless retry, into
                # the bounded one below, then the dead-letter topic.
                raise _Deterministic(exc) from exc

        async def transient_retries() -> None:
            await retry(FANOUT_TRANSIENT, apply_once, retry_on=(Unavailable,), on_retry=count_retry)

        try:
            # Unavailable: retried forever inside; anything else unexpected:
            # retried a few times (a bug or a poison event), then dead-lettered.
            await retry(self._unexpected, transient_retries, retry_on=(Exception,), on_retry=count_retry)
        except asyncio.CancelledError:
            raise
        except _Deterministic as exc:
            metrics.EVENTS_CONSUMED.labels(kind, "dead_lettered").inc()
            await self._to_dead_letter(key, value, "peer_failed", exc.error.message, origin)
            return event
        except DomainError as exc:
            metrics.EVENTS_CONSUMED.labels(kind, "dead_lettered").inc()
            await self._to_dead_letter(key, value, exc.code, exc.message, origin)
            return event
        except Exception as exc:  # noqa: BLE001 - must never escape into faust
            metrics.EVENTS_CONSUMED.labels(kind, "dead_lettered").inc()
            await self._to_dead_letter(key, value, "error", f"{type(exc).__name__}: {exc}", origin)
            return event
        metrics.FANOUT_DURATION.labels(kind).observe(time.perf_counter() - started)
        metrics.EVENTS_CONSUMED.labels(kind, "ok").inc()
        return event

    async def _to_dead_letter(self, key: bytes | None, value: bytes, reason: str, detail: str, origin: dict[str, str]) -> None:
        log.error("event.dead_lettered", reason=reason, detail=detail[:500], **origin)
        metrics.DEAD_LETTERED.labels(reason).inc()
        headers = {"error.reason": reason.encode(), "error.detail": detail[:2000].encode()}
        headers.update({f"origin.{k}": v.encode() for k, v in origin.items()})
        request_id = current_request_id()
        if request_id:
            headers[KAFKA_REQUEST_ID_HEADER] = request_id.encode()

        async def send_once() -> None:
            started = time.perf_counter()
            try:
                fut = await self._dead_letter.send(key=key, value=value, headers=headers)
                await fut  # the dead letter is durable before the offset moves on
            except Exception as exc:
                metrics.KAFKA_PRODUCE_ERRORS.labels(type(exc).__name__).inc()
                raise Unavailable(f"dead-letter topic unavailable: {exc!r}") from exc
            metrics.KAFKA_PRODUCE_LATENCY.observe(time.perf_counter() - started)

        # An exception escaping into faust would ack the message and lose it,
        # so a dead letter that cannot be written is retried until it can
        # (the partition waits, like any transient failure).
        await retry(FANOUT_TRANSIENT, send_once, retry_on=(Unavailable,))
