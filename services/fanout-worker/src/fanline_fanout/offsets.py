"""faust's consumer, committing only offsets the pipeline finished.

The worker's delivery guarantee (``app.py``) is that an offset is committed
only once its event and every event before it in the partition are done:
``OrderedPipeline`` acks in offset order and faust commits the acked run.
faust itself marks offsets done in two other places, and either lets a
commit pass events nobody processed:

* **Skipped events are acked.** After a rebalance the stream drops each
  message fetched in an earlier generation (or taken while the flow is
  suspended) and *acks* it (``Stream._py_aiter``: ``value is
  skipped_value``). A partition revoked and assigned back to the same worker
  then holds acked offsets its new generation has not processed yet: once
  the events before them are done, faust commits past them, and a worker
  stopped in that window (a rolling upgrade stops one seconds after a
  rebalance) leaves them to nobody.
* **Gaps are acked.** When a fetch jumps forward, the offsets between count
  as done (``Consumer._add_gap``): right for transaction markers and
  compacted topics, which the events and chunks topics do not have. Here a
  jump means messages were dropped (faust's read offset ran ahead of a seek,
  faust-streaming #216/#221).

``FinishedOnlyConsumer`` counts an ack only for a message the pipeline
marked finished (``finished``), and a gap only where retention deleted the
offsets (below the partition's log start). What it refuses is counted in
``fanline_fanout_offsets_not_committed_total`` and logged: the commit stays
behind those offsets, so the events are delivered again after the next
rebalance or restart (handlers are idempotent), never lost.

``JumpWatch`` logs a partition whose events reach the stream with a hole in
their offsets within one generation (``offsets.jump``): faust dropped the
messages between (its read offset ahead of a seek) or counted them as a gap.
They are not committed past either; the log line says where to look.
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread, Consumer, Transport
from faust.types import TP

from fanline_shared import metrics
from fanline_shared.logs import get_logger

log = get_logger(__name__)

_FINISHED = "fanline_finished"


def finished(message: Any) -> None:
    """Mark ``message`` as processed by the pipeline: its ack may count."""
    setattr(message, _FINISHED, True)


def is_finished(message: Any) -> bool:
    return bool(getattr(message, _FINISHED, False))


class BatchedFetchThread(AIOKafkaConsumerThread):  # type: ignore[misc]
    """faust's consumer thread, with the fetch settings of the app's
    ``fetch`` (``(fetch_min_bytes, fetch_max_wait_ms)``). faust passes no ``fetch_min_bytes`` to aiokafka, so
    the broker answers a fetch as soon as one event arrives: at a trickle of
    events each one costs a fetch round trip in this thread, a wake-up of the
    worker's loop and a fetch for the broker to serve. A larger minimum with a
    short wait lets a trickle arrive a few events per fetch (issue 31); under
    load the minimum is reached at once and nothing waits."""

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # Read by AIOKafkaConsumer.start() when it creates its Fetcher; the
        # unit tests check aiokafka still keeps them under these names.
        consumer._fetch_min_bytes, consumer._fetch_max_wait_ms = self.app.fetch  # type: ignore[attr-defined]  # a FanoutApp
        return consumer


class FinishedOnlyConsumer(Consumer):  # type: ignore[misc]  # faust's classes are untyped
    """faust's aiokafka consumer whose acks and gaps never run ahead of the
    pipeline (the module's docstring says why), fetching as ``BatchedFetchThread``."""

    def _new_consumer_thread(self) -> AIOKafkaConsumerThread:
        return BatchedFetchThread(self, loop=self.loop, beacon=self.beacon)

    def ack(self, message: Any) -> bool:
        if not is_finished(message):
            # Acked by faust, not by the pipeline: not done. Marked acked so
            # faust does not try again; its offset stays uncommitted.
            message.acked = True
            metrics.OFFSETS_NOT_COMMITTED.labels("unfinished").inc()
            log.info("offsets.unfinished_ack_ignored", topic=message.topic, partition=message.partition, offset=message.offset)
            return False
        return bool(super().ack(message))

    async def _add_gap(self, tp: TP, offset_from: int, offset_to: int) -> None:
        try:
            earliest = (await self.earliest_offsets(tp)).get(tp)
        except Exception as exc:  # noqa: BLE001 - unknown log start: count nothing as done
            log.warning("offsets.log_start_unknown", topic=tp.topic, partition=tp.partition, error=repr(exc))
            earliest = None
        deleted_to = min(offset_to, earliest - 1) if earliest is not None else offset_from - 1
        if deleted_to >= offset_from:
            # Deleted by retention before anyone read them: nothing to process.
            await super()._add_gap(tp, offset_from, deleted_to)
        if deleted_to < offset_to:
            metrics.OFFSETS_NOT_COMMITTED.labels("gap").inc(offset_to - max(offset_from, deleted_to + 1))
            log.warning(
                "offsets.gap_not_committed",
                topic=tp.topic,
                partition=tp.partition,
                first=max(offset_from, deleted_to + 1),
                last=offset_to - 1,
            )


class FinishedOnlyTransport(Transport):  # type: ignore[misc]
    """faust's aiokafka transport, creating a ``FinishedOnlyConsumer``."""

    Consumer = FinishedOnlyConsumer


class JumpWatch:
    """Per partition, the generation and offset of the last event the stream
    delivered; ``saw`` logs a forward hole within one generation."""

    def __init__(self) -> None:
        self._last: dict[Any, tuple[Any, int]] = {}

    def saw(self, message: Any) -> None:
        tp, generation, offset = message.tp, message.generation_id, message.offset
        last = self._last.get(tp)
        if last is not None and last[0] == generation and offset > last[1] + 1:
            log.warning(
                "offsets.jump", topic=tp.topic, partition=tp.partition, first=last[1] + 1, last=offset - 1, generation=generation
            )
        self._last[tp] = (generation, offset)
