"""The asyncio bridge: await driver executions without blocking the loop.

cassandra-driver has no native asyncio support: it runs its own I/O thread
(libev) and reports completions through callbacks on that thread; they are
turned into asyncio results with ``loop.call_soon_threadsafe``
(``callbacks``):

* ``execute`` / ``execute_lwt`` await one statement; every page of the result
  is fetched from the driver's callbacks (never by iterating a ``ResultSet`` in
  the loop, which would fetch later pages synchronously);
* ``execute_concurrent`` runs many executions of one statement with a bounded
  window, entirely on the driver thread (one loop wake-up per call, not one per
  statement): the fan-out hot path; ``execute_each`` does the same for
  already-bound statements (``window``).

Driver failures that mean "the cluster did not answer" (NoHostAvailable,
OperationTimedOut, Unavailable, Read/WriteTimeout, Read/WriteFailure,
overload, lost connections) become ``fanline_shared.errors.Unavailable``;
request-validation errors (bad CQL, unknown table) are programming errors and
propagate unchanged. Every execution is timed in
``metrics.CASSANDRA_LATENCY{statement=name}`` and every failure counted in
``metrics.CASSANDRA_ERRORS{statement=name, error=<class>}``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from cassandra.cluster import ResponseFuture, Session
from cassandra.query import Statement

from .. import metrics, policies
from ..errors import Unavailable
from .callbacks import _post, _release, _translate
from .connection import Params, Row
from .window import _Window

_LATENCY: dict[str, Any] = {}  # statement name -> its label child, resolved once


def _latency(name: str) -> Any:
    found = _LATENCY.get(name)
    if found is None:
        found = _LATENCY[name] = metrics.CASSANDRA_LATENCY.labels(name)
    return found


class _Single:
    """One execution: gathers every page on the driver thread, then posts once."""

    __slots__ = ("fut", "loop", "name", "response", "rows", "started")

    def __init__(self, loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any], name: str) -> None:
        self.loop = loop
        self.fut = fut
        self.name = name
        self.started = time.perf_counter()
        self.rows: list[Row] = []
        self.response: ResponseFuture | None = None

    def on_page(self, rows: list[Row] | None) -> None:
        response = self.response
        assert response is not None
        if rows:
            self.rows.extend(rows)
        if response.has_more_pages and not self.fut.done():
            response.start_fetching_next_page()  # asynchronous: on_page runs again
            return
        self.response = None  # see on_error
        _release(response)
        _latency(self.name).observe(time.perf_counter() - self.started)
        _post(self.loop, self.fut, self.rows, None)

    def on_error(self, exc: BaseException) -> None:
        # The response holds our callbacks and we hold the response: a cycle
        # only the cyclic GC would free, once per statement. Broken here.
        if self.response is not None:
            _release(self.response)
        self.response = None
        _latency(self.name).observe(time.perf_counter() - self.started)
        _post(self.loop, self.fut, None, _translate(exc, self.name))


async def execute(
    session: Session, statement: Statement | str, params: Params = None, *, name: str, request_timeout_s: float | None = None
) -> list[Row]:
    """Run one statement and return all its rows (every page, fetched off-loop).

    ``request_timeout_s`` replaces the session's request timeout for this
    statement only (schema changes: ``policies.MIGRATE_DDL_TIMEOUT_S``)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[list[Row]] = loop.create_future()
    single = _Single(loop, fut, name)
    try:
        if request_timeout_s is None:
            response = session.execute_async(statement, params)
        else:
            response = session.execute_async(statement, params, timeout=request_timeout_s)
    except Exception as exc:
        raise _translate(exc, name) from exc
    single.response = response
    response.add_callbacks(single.on_page, single.on_error)
    return await fut


async def execute_lwt(
    session: Session, statement: Statement | str, params: Params = None, *, name: str
) -> tuple[bool, Row | None]:
    """Run a lightweight transaction: ``(applied, row)``.

    When not applied, ``row`` holds the current values of the row that made the
    condition fail (``[applied]`` is its first column, renamed ``applied`` by
    the row factory) — e.g. the existing user for ``INSERT … IF NOT EXISTS``.
    """
    rows = await execute(session, statement, params, name=name)
    if not rows:
        raise Unavailable(f"cassandra: {name}: lightweight transaction returned no row")
    row = rows[0]
    return bool(row[0]), row


async def execute_concurrent(
    session: Session,
    statement: Statement,
    params_seq: Sequence[Params],
    *,
    name: str,
    concurrency: int | Callable[[], int] = policies.DEFAULT_FANOUT_CONCURRENCY,
) -> list[list[Row]]:
    """Execute ``statement`` once per parameter tuple, at most ``concurrency`` at
    a time; return each execution's rows, in the order of ``params_seq``.
    ``concurrency`` may be a function, asked again as executions complete
    (e.g. a window that shrinks while user-facing requests are being served).

    Raise ``Unavailable`` (the first failure) once the in-flight executions
    finished; executions not yet started are not started. Cancelling the
    awaiting task stops new executions too.
    """
    if not params_seq:
        return []
    if isinstance(concurrency, int):
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        fixed = concurrency

        def limit() -> int:
            return fixed
    else:
        limit = concurrency
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[list[list[Row]]] = loop.create_future()
    window = _Window(session, statement, params_seq, name, loop, fut, limit)
    window.start()
    return await fut


async def execute_each(
    session: Session,
    statements: Sequence[Statement],
    *,
    name: str,
    concurrency: int | Callable[[], int] = policies.DEFAULT_FANOUT_CONCURRENCY,
) -> None:
    """Execute already-bound ``statements`` (e.g. ``replica_batches``), at
    most ``concurrency`` at a time; same window, failure and cancellation
    contract as ``execute_concurrent``. Rows, if any, are dropped."""
    if isinstance(concurrency, int) and concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if not statements:
        return
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[list[list[Row]]] = loop.create_future()
    limit = (lambda: concurrency) if isinstance(concurrency, int) else concurrency
    _Window(session, None, statements, name, loop, fut, limit).start()
    await fut
