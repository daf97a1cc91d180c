"""Event-loop stalls: how long a service's loop could not run, and what held it.

Every Fanline process serves everything from one asyncio loop: while one
callback runs long (a full garbage collection, a synchronous parse, a driver
metadata refresh), every request in flight waits, and the answer's latency
says nothing about why. Run 2228's ``overload`` scenario saw one ~0.7 s pause
of the gateway that set both its maxima, with nothing in the logs to name it.
This module makes such a pause visible three ways:

- a heartbeat on the loop every ``LoopWatch.interval_s`` records how late it
  ran (``fanline_event_loop_lag_seconds``): a sample of the loop's own
  latency, which every request on it pays;
- a watchdog thread looks every ``check_s`` and, when a beat is overdue by
  ``report_s``, logs once per stall where the loop's thread is at that moment
  (WARNING ``event loop blocked``, with its innermost frames), so the log
  names the code holding it. A stall longer than ``interval_s + report_s +
  check_s`` (0.85 s) is always reported, a shorter one from ``report_s`` on
  when it starts late enough after a beat;
- ``gc.callbacks`` time every collection of the two older generations
  (``fanline_gc_pause_seconds``). A collection holds the GIL, so the watchdog
  cannot look during one; its duration is then the answer. The youngest
  generation's collections (hundreds a second under load, well under a
  millisecond each) are not timed: their callbacks would cost more than they
  tell.

Its own cost (issue 31 counts idle CPU), measured on the bench machine with
an idle uvloop: a beat costs ~180 µs of CPU (the loop's wake-up), a check of
the thread ~60 µs; at 10 a second each they took 0.26 % of a core per
process, at these settings (2 beats and 5 checks a second) 0.07 %.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from . import metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoopWatch:
    """How often the loop's heartbeat runs and how late a beat must be before
    the watchdog reports where the loop is (a named policy, as ``policies``)."""

    interval_s: float = 0.5
    report_s: float = 0.15
    check_s: float = 0.2
    frames: int = 12  # innermost frames logged


LOOP_WATCH = LoopWatch()

_watching: set[int] = set()  # ids of the loops watched in this process


def watch(loop: asyncio.AbstractEventLoop | None = None, policy: LoopWatch = LOOP_WATCH) -> None:
    """Watch ``loop`` (the running one by default; call from its thread).
    Idempotent per loop; the collections are timed once per process."""
    loop = loop or asyncio.get_running_loop()
    if id(loop) in _watching:
        return
    _watching.add(id(loop))
    _time_collections()
    _Watchdog(loop, threading.get_ident(), policy).start()


class _Watchdog(threading.Thread):
    def __init__(self, loop: asyncio.AbstractEventLoop, loop_thread: int, policy: LoopWatch) -> None:
        super().__init__(name="fanline-loop-watchdog", daemon=True)
        self._loop, self._loop_thread, self._policy = loop, loop_thread, policy
        self._last = time.monotonic()  # when the heartbeat last ran
        self._reported = 0.0  # the beat whose overdue successor was reported
        loop.call_soon(self._beat, self._last + policy.interval_s)

    def _beat(self, due: float) -> None:
        """On the loop: how late this beat is, and the next one."""
        now = time.monotonic()
        metrics.EVENT_LOOP_LAG.observe(max(0.0, now - due))
        self._last = now
        if not self._loop.is_closed():
            self._loop.call_later(self._policy.interval_s, self._beat, now + self._policy.interval_s)

    def run(self) -> None:
        policy = self._policy
        while not self._loop.is_closed():
            time.sleep(policy.check_s)  # this thread's own wait, never the loop's
            last = self._last
            blocked = time.monotonic() - last - policy.interval_s
            if blocked < policy.report_s or last == self._reported:
                continue
            self._reported = last
            frame = sys._current_frames().get(self._loop_thread)
            where = "".join(traceback.format_stack(frame, limit=policy.frames)) if frame is not None else "(not found)\n"
            log.warning("event loop blocked for %d ms so far; its thread is at (innermost last):\n%s", blocked * 1000, where)


_collection_started: list[float] = []  # perf_counter at the start of the collection under way (GIL held)


def _time_collections() -> None:
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    generation = info["generation"]
    if generation == 0:
        return
    if phase == "start":
        _collection_started[:] = [time.perf_counter()]
    elif _collection_started:
        metrics.GC_PAUSE[generation].observe(time.perf_counter() - _collection_started.pop())
