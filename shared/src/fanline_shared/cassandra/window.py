"""Bounded concurrent executions, driven entirely by driver callbacks.

``_Window`` runs many executions (of one statement, or of already-bound
statements) with at most ``limit()`` in flight; each completion submits the
next ones from the driver thread, so the event loop is woken once, at the
end, with every execution's rows in order (or the first failure, once the
in-flight executions finished). ``bridge.execute_concurrent`` and
``bridge.execute_each`` are its public faces.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from cassandra.cluster import ResponseFuture, Session
from cassandra.query import Statement

from .. import metrics
from .callbacks import _post, _release, _translate
from .connection import Row


class _Window:
    """Bounded concurrent executions of one statement, driven by driver callbacks.

    Up to ``limit()`` requests are in flight; each completion submits the
    next ones from the driver thread, so the event loop is woken only once at
    the end. ``limit`` is asked again at every completion: when it shrinks,
    completions are not replaced until the window fits (at least one request
    stays in flight); when it grows, a completion starts several. On the
    first error no new request is started; the call fails after the in-flight
    ones finished.
    """

    _MAX_DEPTH = 40  # callbacks can run synchronously; avoid deep recursion

    def __init__(
        self,
        session: Session,
        statement: Statement | None,
        params: Sequence[Any],
        name: str,
        loop: asyncio.AbstractEventLoop,
        fut: asyncio.Future[Any],
        limit: Callable[[], int],
    ) -> None:
        self.session = session
        self.limit = limit
        self.statement = statement
        self.params = params
        self.name = name
        self.loop = loop
        self.fut = fut
        self.results: list[list[Row]] = [[] for _ in params]
        self.responses: dict[int, ResponseFuture] = {}  # in flight, by index
        self.lock = threading.Lock()
        self.next = 0
        self.in_flight = 0
        self.error: BaseException | None = None
        self.finished = False
        self.local = threading.local()
        self.latency = metrics.CASSANDRA_LATENCY.labels(name)

    def start(self) -> None:
        with self.lock:  # reserved first: the first completions may already run
            count = min(max(1, self.limit()), len(self.params))
            self.in_flight += count
        for _ in range(count):
            self._submit()

    def _claim(self) -> int | None:
        """The next index to execute in a slot already counted in flight (by
        ``start`` or ``_done``); None, releasing the slot, if nothing is left."""
        with self.lock:
            if self.error is not None or self.next >= len(self.params) or self.fut.done():
                self.in_flight -= 1
                return None
            index = self.next
            self.next += 1
            return index

    def _submit(self) -> None:
        depth = getattr(self.local, "depth", 0)
        if depth > self._MAX_DEPTH:
            # Completed synchronously many times in a row: continue on the
            # driver's executor to unwind the stack.
            self.session.submit(self._submit)
            return
        index = self._claim()
        if index is None:
            self._maybe_finish()
            return
        self.local.depth = depth + 1
        try:
            started = time.perf_counter()
            try:
                if self.statement is None:  # ``params`` holds whole statements (``execute_each``)
                    response = self.session.execute_async(self.params[index])
                else:
                    response = self.session.execute_async(self.statement, self.params[index])
            except Exception as exc:  # noqa: BLE001 - binding errors, shut down: must finish the window
                self._failed(exc, None, started)
                return
            # Kept by index, not passed as a callback argument: the response
            # holds its callbacks' arguments, so that would be a cycle (response
            # → args → response) for the cyclic GC to free, once per row.
            self.responses[index] = response
            response.add_callbacks(self._done, self._failed, callback_args=(index, started), errback_args=(index, started))
        finally:
            self.local.depth = depth

    def _done(self, rows: list[Row] | None, index: int, started: float) -> None:
        if rows:
            self.results[index].extend(rows)
        response = self.responses[index]
        if response.has_more_pages and not self.fut.done():
            response.start_fetching_next_page()
            return
        _release(self.responses.pop(index))
        self.latency.observe(time.perf_counter() - started)
        with self.lock:
            self.in_flight -= 1
            room = self.limit() - self.in_flight
            if room < 1 and self.in_flight == 0:
                room = 1
            # Reserve the slots now: completions on other threads see them.
            self.in_flight += max(0, room)
        for _ in range(room):
            self._submit()

    def _failed(self, exc: BaseException, index: int | None, started: float) -> None:
        response = self.responses.pop(index, None) if index is not None else None
        if response is not None:
            _release(response)
        self.latency.observe(time.perf_counter() - started)
        translated = _translate(exc, self.name)
        with self.lock:
            self.in_flight -= 1
            if self.error is None:
                self.error = translated
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        with self.lock:
            if self.finished or self.in_flight:
                return
            if self.error is None and self.next < len(self.params) and not self.fut.done():
                return
            self.finished = True
            error = self.error
        _post(self.loop, self.fut, self.results, error)
