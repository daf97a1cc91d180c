"""Cassandra connector and asyncio bridge shared by every Cassandra adapter.

cassandra-driver has no native asyncio support: it runs its own I/O thread
(libev) and reports completions through callbacks on that thread. This module
turns those callbacks into asyncio results with ``loop.call_soon_threadsafe``,
so the event loop never blocks on a driver call:

* ``connect`` / ``shutdown`` block (TCP handshakes, metadata refresh) and must
  be run with ``asyncio.to_thread`` — ``open_session``/``close_session`` do that;
* ``execute`` / ``execute_lwt`` await one statement; every page of the result
  is fetched from the driver's callbacks (never by iterating a ``ResultSet`` in
  the loop, which would fetch later pages synchronously);
* ``execute_concurrent`` runs many executions of one statement with a bounded
  window, entirely on the driver thread (one loop wake-up per call, not one per
  statement): the fan-out hot path;
* ``migrate`` creates a keyspace and applies numbered, idempotent migrations.

Driver failures that mean "the cluster did not answer" (NoHostAvailable,
OperationTimedOut, Unavailable, Read/WriteTimeout, Read/WriteFailure,
overload, lost connections) become ``fanline_shared.errors.Unavailable``;
request-validation errors (bad CQL, unknown table) are programming errors and
propagate unchanged. Every execution is timed in
``metrics.CASSANDRA_LATENCY{statement=name}`` and every failure counted in
``metrics.CASSANDRA_ERRORS{statement=name, error=<class>}``.

The outbox table used by every owning service lives here too
(``OUTBOX_MIGRATIONS``, ``CassandraOutbox``) so the two services share one
implementation.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import logging
import math
import threading
import time
import uuid
from collections import namedtuple
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable, ResponseFuture, Session
from cassandra.connection import ProtocolVersionUnsupported
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from cassandra.protocol import RequestValidationException as _ProtocolValidationError
from cassandra.query import BatchStatement, BatchType, PreparedStatement, Statement
from cassandra.query import _clean_column_name as _clean_name

from cassandra import ConsistencyLevel, DriverException, ProtocolVersion
from cassandra import RequestValidationException as _DriverValidationError

from . import metrics, policies
from .config import StorageSettings
from .domain import OutboxEvent, min_timeuuid, timeuuid_sort_key, timeuuid_time
from .errors import Unavailable

log = logging.getLogger(__name__)

Row = Any  # a named tuple built by the driver's row factory
Params = Sequence[Any] | None

# Rows per page. Every read in the adapters carries a LIMIT below this, so a
# result is a single page; if one is not, the next pages are still fetched from
# the driver's callbacks (see ``_Single``), never synchronously in the loop.
FETCH_SIZE = 5000
MAX_TTL = 630_720_000  # Cassandra's maximum TTL: 20 years

try:  # cassandra-driver 3.30.1 wheels bundle libev; asyncore is gone in 3.12
    from cassandra.io.libevreactor import LibevConnection as _Connection
except ImportError:  # pragma: no cover - source installs without libev
    _Connection = None


def _consistency(name: str) -> int:
    return int(ConsistencyLevel.name_to_value[name])


READ_CL = _consistency(policies.CONSISTENCY_READ)
WRITE_CL = _consistency(policies.CONSISTENCY_WRITE)
SERIAL_CL = _consistency(policies.CONSISTENCY_SERIAL)


# --- rows ---------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def _row_type(colnames: tuple[str, ...]) -> Any:
    # Same names as the driver's own factory ("[applied]" -> "applied").
    return namedtuple("Row", [_clean_name(c) for c in colnames], rename=True)  # type: ignore[misc]


def cached_named_tuple_factory(colnames: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[Row]:
    """Rows as named tuples, like the driver's ``named_tuple_factory``, but
    with one class per column list instead of a new class per result set
    (which costs ~0.1 ms, measured: 2 ms of CPU for a 20-tweet page)."""
    make = _row_type(tuple(colnames))
    return [make(*row) for row in rows]


# --- connecting ---------------------------------------------------------------


def connect(settings: StorageSettings) -> Session:
    """Connect to the cluster (blocking: call through ``asyncio.to_thread``).

    One execution profile: token-aware routing over DC-aware round robin in the
    local DC, LOCAL_QUORUM reads (writes override it per statement via
    ``prepare``), LOCAL_SERIAL for lightweight transactions, the configured
    request timeout. Native protocol ``settings.protocol_version`` (v4 unless
    configured, see ``StorageSettings``; v5 falls back to v4 for clusters
    older than 4.0) — set explicitly, because letting the driver negotiate
    starts at its DSE versions and logs a downgrade warning per connection.
    Raise ``Unavailable`` if no contact point answers.
    """
    if settings.protocol_version < ProtocolVersion.V5:
        return _connect(settings, ProtocolVersion.V4)
    try:
        return _connect(settings, ProtocolVersion.V5)
    except _ProtocolTooNew:
        return _connect(settings, ProtocolVersion.V4)


class _ProtocolTooNew(Exception):
    pass


def _connect(settings: StorageSettings, protocol_version: int) -> Session:
    profile = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=settings.local_dc)),
        consistency_level=READ_CL,
        serial_consistency_level=SERIAL_CL,
        request_timeout=settings.request_timeout_s,
        row_factory=cached_named_tuple_factory,
    )
    kwargs: dict[str, Any] = {}
    if _Connection is not None:
        kwargs["connection_class"] = _Connection
    cluster: Cluster | None = None
    try:
        cluster = Cluster(
            contact_points=list(settings.cassandra_hosts),
            port=settings.cassandra_port,
            protocol_version=protocol_version,
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            connect_timeout=min(10.0, settings.request_timeout_s),
            control_connection_timeout=settings.request_timeout_s,
            **kwargs,
        )
        return cluster.connect()
    except Exception as exc:
        if cluster is not None:
            cluster.shutdown()
        if isinstance(exc, NoHostAvailable) and protocol_version > ProtocolVersion.V4 and any(
            isinstance(e, ProtocolVersionUnsupported) or "protocol version" in str(e).lower()
            for e in exc.errors.values()
        ):
            raise _ProtocolTooNew() from exc
        if isinstance(exc, (NoHostAvailable, DriverException, OSError)):
            raise Unavailable(f"cassandra unreachable at {_contact(settings)}: {exc}") from exc
        raise


def _contact(settings: StorageSettings) -> str:
    return ",".join(f"{h}:{settings.cassandra_port}" for h in settings.cassandra_hosts)


async def open_session(settings: StorageSettings) -> Session:
    """``connect`` without blocking the event loop."""
    return await asyncio.to_thread(connect, settings)


async def close_session(session: Session | None) -> None:
    """Shut the session's cluster down (idempotent) without blocking the loop."""
    if session is None:
        return
    await asyncio.to_thread(session.cluster.shutdown)


def prepare(session: Session, cql: str, *, write: bool = False, idempotent: bool = True) -> PreparedStatement:
    """Prepare once (blocking; call from ``to_thread`` in ``start()``).

    Writes get ``CONSISTENCY_WRITE``; ``idempotent`` lets the driver retry or
    speculate — leave it False for counters and LWTs.
    """
    stmt = session.prepare(cql)
    stmt.consistency_level = WRITE_CL if write else READ_CL
    stmt.serial_consistency_level = SERIAL_CL
    stmt.is_idempotent = idempotent
    stmt.fetch_size = FETCH_SIZE
    return stmt


def batch(statements: Iterable[tuple[PreparedStatement, Sequence[Any]]], *, logged: bool = False) -> BatchStatement:
    """A batch with the write consistency.

    Use unlogged batches only for rows of ONE partition (one mutation on the
    replicas); a logged batch costs a batchlog round trip and is reserved for
    small writes that must be atomic across partitions.
    """
    b = BatchStatement(
        batch_type=BatchType.LOGGED if logged else BatchType.UNLOGGED,
        consistency_level=WRITE_CL,
    )
    b.serial_consistency_level = SERIAL_CL
    for stmt, params in statements:
        b.add(stmt, params)
    return b


# --- the asyncio bridge ---------------------------------------------------------


def _is_validation_error(exc: BaseException) -> bool:
    return isinstance(exc, (_DriverValidationError, _ProtocolValidationError))


def _translate(exc: BaseException, name: str) -> BaseException:
    """Count the failure; map infrastructure failures to ``Unavailable``."""
    metrics.CASSANDRA_ERRORS.labels(name, type(exc).__name__).inc()
    if _is_validation_error(exc) or not isinstance(exc, Exception):
        return exc
    if isinstance(exc, (asyncio.CancelledError, TypeError, ValueError, KeyError)):
        return exc
    unavailable = Unavailable(f"cassandra: {name} failed: {type(exc).__name__}: {exc}")
    unavailable.__cause__ = exc
    return unavailable


def _resolve(fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    """Runs in the loop thread."""
    if fut.done():  # the awaiting task was cancelled
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


def _post(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    """Runs in a driver thread: hand the outcome to the loop."""
    try:
        loop.call_soon_threadsafe(_resolve, fut, result, exc)
    except RuntimeError:  # loop closed while the request was in flight
        pass


def _release(response: ResponseFuture) -> None:
    """Drop a finished request's reference to its (already cancelled) timeout
    timer.

    The driver's timer calls back a bound method of the request, so every
    request is a reference cycle (request → timer → request) that only
    Python's cyclic GC frees — with its statement, message, event and query
    plan, ~26 objects per statement. Under fan-out that is 100k objects a
    second, and the collections that freed them stalled tweet-store's event
    loop for 10-60 ms at a time (measured with GC callbacks during the bench's
    post-latency phase). Callbacks run after the driver cancelled the timer
    (cassandra-driver 3.30: ``_set_final_result`` / ``_set_final_exception``);
    tests/contract/test_cassandra_bridge.py fails if a driver change makes
    requests cyclic garbage again.
    """
    response._timer = None


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
        metrics.CASSANDRA_LATENCY.labels(self.name).observe(time.perf_counter() - self.started)
        _post(self.loop, self.fut, self.rows, None)

    def on_error(self, exc: BaseException) -> None:
        # The response holds our callbacks and we hold the response: a cycle
        # only the cyclic GC would free, once per statement. Broken here.
        if self.response is not None:
            _release(self.response)
        self.response = None
        metrics.CASSANDRA_LATENCY.labels(self.name).observe(time.perf_counter() - self.started)
        _post(self.loop, self.fut, None, _translate(exc, self.name))


async def execute(session: Session, statement: Statement | str, params: Params = None, *, name: str) -> list[Row]:
    """Run one statement and return all its rows (every page, fetched off-loop)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[list[Row]] = loop.create_future()
    single = _Single(loop, fut, name)
    try:
        response = session.execute_async(statement, params)
    except Exception as exc:
        raise _translate(exc, name) from exc
    single.response = response
    response.add_callbacks(single.on_page, single.on_error)
    return await fut


async def execute_lwt(session: Session, statement: Statement | str, params: Params = None, *, name: str
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

    def __init__(self, session: Session, statement: Statement | None, params: Sequence[Any], name: str,
                 loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any], limit: Callable[[], int]) -> None:
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
            response.add_callbacks(self._done, self._failed, callback_args=(index, started),
                                   errback_args=(index, started))
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


async def execute_concurrent(session: Session, statement: Statement, params_seq: Sequence[Params], *, name: str,
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


async def execute_each(session: Session, statements: Sequence[Statement], *, name: str,
                       concurrency: int | Callable[[], int] = policies.DEFAULT_FANOUT_CONCURRENCY) -> None:
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


def replica_batches(session: Session, statement: PreparedStatement, params_seq: Sequence[Params], *,
                    rows: int) -> list[BatchStatement]:
    """The rows of ``statement`` as small unlogged batches of at most ``rows``
    rows, each holding only partitions whose first replica is the same node.

    For bulk writes of one row to each of many partitions (fan-out): one
    request per batch instead of one per row saves the driver and the node
    most of their per-request work, and grouping by replica keeps each batch
    on the node that owns its partitions (the token-aware policy routes a
    batch by its first statement), so the coordinator forwards nothing it
    would not have forwarded for single rows. Keep ``rows`` at or under the
    node's ``unlogged_batch_across_partitions_warn_threshold`` (10 by
    default): larger batches make the node warn on every request. Not atomic
    and not isolated: a failed batch may have written some of its rows, so
    the writes must be idempotent (a retry rewrites them)."""
    if rows < 1:
        raise ValueError("rows must be >= 1")
    metadata = session.cluster.metadata
    keyspace = statement.keyspace
    groups: dict[Any, list[Any]] = {}
    for params in params_seq:
        bound = statement.bind(params)
        key = bound.routing_key
        replicas = metadata.get_replicas(keyspace, key) if keyspace and key is not None else []
        groups.setdefault(replicas[0] if replicas else None, []).append(bound)
    out: list[BatchStatement] = []
    for bounds in groups.values():
        for start in range(0, len(bounds), rows):
            b = BatchStatement(batch_type=BatchType.UNLOGGED, consistency_level=WRITE_CL)
            for bound in bounds[start:start + rows]:
                b.add(bound)
            out.append(b)
    return out


# --- schema ---------------------------------------------------------------------------


def _datacenters(session: Session, fallback: str) -> list[str]:
    dcs = sorted({host.datacenter for host in session.cluster.metadata.all_hosts() if host.datacenter})
    return dcs or [fallback]


def _split(cql: str) -> list[str]:
    """Statements of one migration, separated by ``;`` at the end of a line."""
    parts, current = [], []
    for line in cql.splitlines():
        current.append(line)
        if line.rstrip().endswith(";"):
            parts.append("\n".join(current).strip().rstrip(";").strip())
            current = []
    tail = "\n".join(current).strip()
    if tail:
        parts.append(tail)
    return [p for p in parts if p]


async def migrate(session: Session, keyspace: str, replication_factor: int, migrations: Sequence[str], *,
                  local_dc: str = "datacenter1") -> None:
    """Create ``keyspace`` and apply ``migrations`` (1-based versions) once each.

    Replication: ``NetworkTopologyStrategy`` with ``replication_factor`` in
    every datacenter the driver sees (``local_dc`` if it sees none).
    SimpleStrategy ignores racks and DCs, which ``LOCAL_QUORUM`` and
    ``LOCAL_SERIAL`` are defined over, and is not recommended in production;
    NTS is correct for one node as well as several DCs.

    Each migration is one or more CQL statements (separated by ``;`` at a line
    end) that must be idempotent (``IF NOT EXISTS``): applied versions are
    recorded in ``schema_migrations``, but two processes starting at once may
    both apply a migration, which is then harmless. Migrations are append-only:
    never edit one that has shipped. Waits for schema agreement at the end.
    """
    _check_identifier(keyspace)
    replication = ", ".join(f"'{dc}': {replication_factor}" for dc in _datacenters(session, local_dc))
    await execute(
        session,
        f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = "
        f"{{'class': 'NetworkTopologyStrategy', {replication}}}",
        name="migrate",
    )
    await execute(
        session,
        f"CREATE TABLE IF NOT EXISTS {keyspace}.schema_migrations (version int PRIMARY KEY, applied_at timestamp)",
        name="migrate",
    )
    rows = await execute(session, f"SELECT version FROM {keyspace}.schema_migrations", name="migrate")
    applied = {row.version for row in rows}
    for version, cql in enumerate(migrations, start=1):
        if version in applied:
            continue
        for statement in _split(cql.replace("{keyspace}", keyspace)):
            await execute(session, statement, name="migrate")
        await execute(
            session,
            f"INSERT INTO {keyspace}.schema_migrations (version, applied_at) VALUES (%s, %s)",
            (version, datetime.now(UTC)),
            name="migrate",
        )
        log.info("cassandra: applied migration %d to %s", version, keyspace)
    agreed = await asyncio.to_thread(session.cluster.control_connection.wait_for_schema_agreement)
    if agreed is False:
        raise Unavailable(f"cassandra: no schema agreement after migrating {keyspace}")


def _check_identifier(name: str) -> None:
    if not name.replace("_", "a").isalnum() or not name[0].isalpha() or len(name) > 48:
        raise ValueError(f"invalid keyspace name {name!r}")


async def drop_keyspace(session: Session, keyspace: str) -> None:
    """Drop a keyspace (tests and tooling only)."""
    _check_identifier(keyspace)
    await execute(session, f"DROP KEYSPACE IF EXISTS {keyspace}", name="drop_keyspace")


async def ping(session: Session | None) -> None:
    """Raise ``Unavailable`` unless the cluster answers a trivial query."""
    if session is None:
        raise Unavailable("cassandra: not connected")
    await execute(session, "SELECT release_version FROM system.local", name="ping")


class Keyspace:
    """The lifecycle of one owning service's keyspace (the ``Lifecycle`` port).

    ``start`` connects, migrates and then calls every registered ``prepare``
    callback (on a worker thread: preparing blocks) so repositories prepare
    their statements once; ``close`` shuts the cluster down; ``ping`` runs a
    trivial query. Repositories read ``session`` on every call.
    """

    def __init__(self, settings: StorageSettings, owner: str, migrations: Sequence[str]) -> None:
        self.settings = settings
        self.name = settings.keyspace(owner)
        self.migrations = tuple(migrations)
        self._session: Session | None = None
        self._preparers: list[Callable[[Session], None]] = []
        self._lock = asyncio.Lock()

    def on_start(self, prepare: Callable[[Session], None]) -> None:
        self._preparers.append(prepare)

    @property
    def session(self) -> Session:
        if self._session is None:
            raise Unavailable(f"cassandra: keyspace {self.name} is not started")
        return self._session

    async def start(self) -> None:
        async with self._lock:
            if self._session is not None:
                return
            session = await open_session(self.settings)
            try:
                await migrate(session, self.name, self.settings.replication_factor, self.migrations,
                              local_dc=self.settings.local_dc)
                await asyncio.to_thread(self._prepare_all, session)
            except BaseException:
                await close_session(session)
                raise
            self._session = session

    def _prepare_all(self, session: Session) -> None:
        try:
            for prepare_fn in self._preparers:
                prepare_fn(session)
        except (NoHostAvailable, DriverException) as exc:
            if _is_validation_error(exc):
                raise
            raise Unavailable(f"cassandra: preparing statements of {self.name} failed: {exc}") from exc

    async def close(self) -> None:
        async with self._lock:
            session, self._session = self._session, None
        await close_session(session)

    async def ping(self) -> None:
        await ping(self._session)

    def outbox(self) -> CassandraOutbox:
        """This keyspace's outbox (its statements are prepared on start)."""
        box = CassandraOutbox(self.name)
        self.on_start(box.prepare)
        return box


class Repository:
    """Base of a repository over one ``Keyspace``: ``_prepare`` runs on start."""

    def __init__(self, keyspace: Keyspace) -> None:
        self._ks = keyspace
        keyspace.on_start(self._prepare)

    def _prepare(self, session: Session) -> None:
        raise NotImplementedError

    @property
    def _session(self) -> Session:
        return self._ks.session


# --- time helpers -----------------------------------------------------------------------


def to_utc(value: datetime) -> datetime:
    """A driver timestamp (naive UTC, millisecond precision) as an aware datetime."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def truncate_ms(value: datetime) -> datetime:
    """``value`` in UTC at the millisecond precision a ``timestamp`` column keeps,
    so what a write returns equals what a later read returns."""
    value = value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def ttl_until(expires_at: datetime, now: datetime) -> int:
    """A TTL that keeps a row at least until ``expires_at``: 0 when that is
    past, else the whole seconds left rounded up, plus one — Cassandra counts a
    TTL from the whole second of the write, so a row may otherwise expire up
    to a second early. Readers that need the exact instant compare a stored
    expiry. Capped at Cassandra's maximum TTL (20 years)."""
    seconds = (expires_at - now).total_seconds()
    if seconds <= 0:
        return 0
    return min(math.ceil(seconds) + 1, MAX_TTL)


# --- the outbox ---------------------------------------------------------------------------

OUTBOX_SHARDS = 8
# An event row is written within this long of its id's timestamp (ids are made
# right before the write; requests time out after seconds). Only buckets older
# than that may be dropped from the bucket index once empty.
OUTBOX_CLOSE_AFTER = timedelta(minutes=10)
# Writers skip re-indexing a minute they indexed themselves only this recently.
_INDEX_TRUST_MINUTES = 5
_MINUTE = 60


OUTBOX_MIGRATIONS = (
    # Events partitioned by (shard, minute of the event id) so that no partition
    # grows without bound and the tombstones left by acks stay in closed
    # minutes that the relay stops reading. A resurrected outbox row (a
    # tombstone purged before it reached every replica) only re-publishes an
    # idempotent event, so a short gc_grace_seconds is safe; unpublished events
    # expire after 7 days.
    """
    CREATE TABLE IF NOT EXISTS {keyspace}.outbox (
        shard int,
        minute bigint,
        event_id timeuuid,
        key text,
        payload blob,
        PRIMARY KEY ((shard, minute), event_id)
    ) WITH CLUSTERING ORDER BY (event_id ASC)
      AND gc_grace_seconds = 3600
      AND default_time_to_live = 604800;
    """,
    # Which minutes of a shard may still hold events: written before the event,
    # removed by the relay once a closed minute is empty (no TTL: an index row
    # must not expire before the events it points to). Ascending, so the relay
    # reads the oldest first.
    """
    CREATE TABLE IF NOT EXISTS {keyspace}.outbox_minutes (
        shard int,
        minute bigint,
        PRIMARY KEY (shard, minute)
    ) WITH CLUSTERING ORDER BY (minute ASC)
      AND gc_grace_seconds = 3600;
    """,
)


def unix_minute(when: datetime) -> int:
    return int(when.timestamp()) // _MINUTE


def outbox_partition(event_id: uuid.UUID) -> tuple[int, int]:
    """``(shard, minute)`` of an event: shard from the id's random node bits."""
    return event_id.int % OUTBOX_SHARDS, unix_minute(timeuuid_time(event_id))


class CassandraOutbox:
    """The ``Outbox`` port over ``outbox`` + ``outbox_minutes`` of one keyspace.

    Owning adapters store an event with ``ensure_index(event)`` followed by
    ``row_write(event)`` (inside their own batch); this class reads and
    acknowledges them.
    """

    def __init__(self, keyspace: str) -> None:
        self.keyspace = keyspace
        self.session: Session | None = None
        self._indexed: set[tuple[int, int]] = set()

    def prepare(self, session: Session) -> None:
        """Blocking: prepare the statements (call from ``to_thread``)."""
        ks = self.keyspace
        self.session = session
        self._insert = prepare(
            session, f"INSERT INTO {ks}.outbox (shard, minute, event_id, key, payload) VALUES (?, ?, ?, ?, ?)",
            write=True)
        self._insert_minute = prepare(
            session, f"INSERT INTO {ks}.outbox_minutes (shard, minute) VALUES (?, ?)", write=True)
        self._minutes = prepare(
            session, f"SELECT minute FROM {ks}.outbox_minutes WHERE shard = ? AND minute <= ? LIMIT ?")
        self._read = prepare(
            session,
            f"SELECT event_id, key, payload FROM {ks}.outbox WHERE shard = ? AND minute = ? AND event_id < ? "
            "LIMIT ?")
        self._delete = prepare(
            session, f"DELETE FROM {ks}.outbox WHERE shard = ? AND minute = ? AND event_id = ?", write=True)
        self._delete_minute = prepare(
            session, f"DELETE FROM {ks}.outbox_minutes WHERE shard = ? AND minute = ?", write=True)

    def row_write(self, event: OutboxEvent) -> tuple[PreparedStatement, tuple[Any, ...]]:
        """The write of the event's row (callers put it in their own batch)."""
        shard, minute = outbox_partition(event.id)
        return self._insert, (shard, minute, event.id, event.key, event.payload)

    async def ensure_index(self, event: OutboxEvent) -> None:
        """Record the event's minute in ``outbox_minutes``: before (or with) the
        row, so a crash never leaves a row the relay cannot find.

        Each process remembers the minutes it indexed recently and skips
        rewriting them (one index write per shard-minute instead of one per
        event). Only recent minutes are trusted: the relay may drop the index
        row of a minute once it is closed and empty."""
        index = self.index_write(event)
        if index is None:
            return
        await execute(self._session(), index[0], index[1], name="outbox_index")
        self.remember_index(event)

    def index_write(self, event: OutboxEvent) -> tuple[PreparedStatement, tuple[Any, ...]] | None:
        """The index write ``ensure_index`` would do, or None if this process
        indexed the event's minute recently; for callers that put it in the
        same (logged) batch as the row. Call ``remember_index`` once written."""
        shard, minute = outbox_partition(event.id)
        if (shard, minute) in self._indexed and minute >= unix_minute(datetime.now(UTC)) - _INDEX_TRUST_MINUTES:
            return None
        return self._insert_minute, (shard, minute)

    def remember_index(self, event: OutboxEvent) -> None:
        if len(self._indexed) > 4096:
            self._indexed.clear()
        self._indexed.add(outbox_partition(event.id))

    async def append(self, event: OutboxEvent) -> None:
        """Store one event on its own (index first)."""
        await self.ensure_index(event)
        stmt, params = self.row_write(event)
        await execute(self._session(), stmt, params, name="outbox_append")

    def _session(self) -> Session:
        if self.session is None:
            raise Unavailable("cassandra: outbox not started")
        return self.session

    async def pending(self, older_than: datetime, limit: int) -> list[OutboxEvent]:
        if limit <= 0:
            return []
        session = self._session()
        # Strictly older than ``older_than``: below its smallest timeuuid.
        bound = min_timeuuid(older_than)
        last_minute = unix_minute(older_than)
        closed_before = unix_minute(datetime.now(UTC) - OUTBOX_CLOSE_AFTER)
        per_shard = await asyncio.gather(
            *(self._pending_shard(session, shard, bound, last_minute, closed_before, limit)
              for shard in range(OUTBOX_SHARDS))
        )
        merged = heapq.merge(*per_shard, key=lambda e: (timeuuid_time(e.id), timeuuid_sort_key(e.id)))
        return [event for event, _ in zip(merged, range(limit), strict=False)]

    async def _pending_shard(self, session: Session, shard: int, bound: uuid.UUID, last_minute: int,
                             closed_before: int, limit: int) -> list[OutboxEvent]:
        minutes = await execute(session, self._minutes, (shard, last_minute, 10_000), name="outbox_minutes")
        events: list[OutboxEvent] = []
        for row in minutes:
            rows = await execute(session, self._read, (shard, row.minute, bound, limit - len(events)),
                                 name="outbox_pending")
            events.extend(OutboxEvent(id=r.event_id, key=r.key, payload=bytes(r.payload)) for r in rows)
            if not rows and row.minute < closed_before:
                # Closed and drained: stop reading it on every sweep.
                await execute(session, self._delete_minute, (shard, row.minute), name="outbox_minute_drop")
            if len(events) >= limit:
                break
        events.sort(key=lambda e: (timeuuid_time(e.id), timeuuid_sort_key(e.id)))
        return events

    async def ack(self, event_ids: Sequence[uuid.UUID]) -> None:
        if not event_ids:
            return
        params = [(*outbox_partition(event_id), event_id) for event_id in dict.fromkeys(event_ids)]
        await execute_concurrent(self._session(), self._delete, params, name="outbox_ack", concurrency=32)
