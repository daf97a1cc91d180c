"""Every gateway replica's view of the events topic, for live streams and
for the revocations of cached sessions (``sessions.py``).

One aiokafka consumer per gateway process, *without* a consumer group: it is
assigned every partition and starts at their end, so each replica sees every
event from the moment it starts, nothing is committed, and replicas never
rebalance one another. Events before start-up are not needed: a client that
was away resumes with ``Last-Event-ID`` (read from tweet-store, not from
Kafka). The cost is one fetch session per replica on each partition, and
events for users with no open stream are decoded and dropped — cheap
compared with the fan-out itself (see docs/architecture.md, "Live streams").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

from fanline_shared.config import KafkaSettings
from fanline_shared.events import Event, InvalidEvent, SessionRevoked, decode

from .sessions import SessionCache
from .stream_hub import Hub

log = logging.getLogger(__name__)

RETRY_S = 2.0
MAX_RECORDS = 500


class EventTap:
    """Feeds ``hub`` (live streams, if on) and ``sessions`` (the session
    cache: ``SessionRevoked`` events, and whether they can arrive at all)."""

    def __init__(self, kafka: KafkaSettings, hub: Hub | None, sessions: SessionCache | None = None) -> None:
        self._kafka = kafka
        self._hub = hub
        self._sessions = sessions
        self._task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()  # set once partitions are assigned and positioned

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self._kafka.bootstrap,
                group_id=None,  # no group: every partition, on every replica
                enable_auto_commit=False,
                auto_offset_reset="latest",
                request_timeout_ms=int(max(self._kafka.request_timeout_s, 5) * 1000) + 1000,
                # A long poll: the broker answers as soon as an event arrives, so this bounds
                # only empty fetches. At 100 ms an idle gateway asked 10 times a second,
                # which cost the broker more than the gateway (issue 31).
                fetch_max_wait_ms=500,
                metadata_max_age_ms=5000,  # notice the topic soon if it is created after us
                **self._kafka.security.client_kwargs(),  # TLS / SASL (engine_security)
            )
            try:
                await consumer.start()
                await self._wait_for_topic(consumer)
                consumer.subscribe([self._kafka.events_topic])
                await self._consume(consumer)
            except asyncio.CancelledError:
                raise
            except (KafkaError, OSError) as exc:
                log.warning("live event tap: %r; retrying in %.0f s", exc, RETRY_S)
            except Exception:  # a routing bug must not end live updates for good
                log.exception("live event tap failed; retrying in %.0f s", RETRY_S)
            finally:
                if self._sessions is not None:
                    self._sessions.disconnected()
                with contextlib.suppress(Exception):
                    await consumer.stop()
            self.ready.clear()
            await asyncio.sleep(RETRY_S)

    async def _wait_for_topic(self, consumer: AIOKafkaConsumer) -> None:
        """Subscribe only once the topic exists: a consumer's metadata request
        for a missing topic lets the broker auto-create it (aiokafka asks
        with allow_auto_topic_creation), with the broker's default partition
        count instead of FANLINE_TOPIC_PARTITIONS. Listing all topics never
        creates one."""
        while self._kafka.events_topic not in await consumer.topics():
            await asyncio.sleep(RETRY_S / 4)

    async def _consume(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            batches = await consumer.getmany(timeout_ms=1000, max_records=MAX_RECORDS)
            if consumer.assignment() and not self.ready.is_set():
                self.ready.set()
                if self._sessions is not None:
                    self._sessions.connected()
            events: list[Event] = []
            for records in batches.values():
                for record in records:
                    if record.value is None:
                        continue
                    try:
                        event = decode(record.value)
                    except InvalidEvent:
                        continue  # the worker dead-letters it; a stream just skips it
                    if isinstance(event, SessionRevoked):
                        if self._sessions is not None:
                            self._sessions.revoked(event.data.username)
                    else:
                        events.append(event)
            if events and self._hub is not None:
                await self._hub.dispatch(events)
