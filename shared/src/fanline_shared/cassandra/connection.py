"""Connecting to the cluster, and the defaults every statement shares.

* ``connect`` / ``shutdown`` block (TCP handshakes, metadata refresh) and must
  be run with ``asyncio.to_thread`` — ``open_session``/``close_session`` do that;
  ``connect`` raises ``fanline_shared.errors.Unavailable`` if no contact point
  answers. ``open_session`` has the connections served by the calling event
  loop (``settings.reactor``, ``loop_reactor``): from then on no blocking
  driver call (``prepare``, ``Session.execute``, ``set_keyspace``) may run on
  that loop's thread — its answer could never be read.
* One execution profile: token-aware routing, ``READ_CL`` reads,
  ``SERIAL_CL`` for lightweight transactions, rows as named tuples with one
  class per column list (``cached_named_tuple_factory``).
* ``prepare`` gives a statement the consistency of a read or a write
  (``WRITE_CL``), the serial consistency, idempotence and ``FETCH_SIZE``.
"""

from __future__ import annotations

import asyncio
import functools
from collections import namedtuple
from collections.abc import Callable, Sequence
from typing import Any

from cassandra import ConsistencyLevel, DriverException, ProtocolVersion
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable, Session
from cassandra.connection import ProtocolVersionUnsupported
from cassandra.policies import (
    DCAwareRoundRobinPolicy,
    ExponentialReconnectionPolicy,
    HostStateListener,
    TokenAwarePolicy,
)
from cassandra.query import PreparedStatement
from cassandra.query import _clean_column_name as _clean_name

from .. import metrics, policies
from ..config import StorageSettings
from ..errors import Unavailable
from .loop_reactor import LoopConnection

Row = Any  # a named tuple built by the driver's row factory
Params = Sequence[Any] | None

# Rows per page. Every read in the adapters carries a LIMIT below this, so a
# result is a single page; if one is not, the next pages are still fetched from
# the driver's callbacks (see ``bridge._Single``), never synchronously in the loop.
FETCH_SIZE = 5000

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
def _row_maker(colnames: tuple[str, ...]) -> Callable[[Sequence[Any]], Row]:
    # Same names as the driver's own factory ("[applied]" -> "applied").
    row_type = namedtuple("Row", [_clean_name(c) for c in colnames], rename=True)  # type: ignore[misc]
    # tuple.__new__(Row, values) is what Row._make does, without a Python
    # frame per row: Row(*values) runs the class's generated ``__new__``
    # lambda, 8.6 % of the fan-out worker's samples (py-spy) reading pages
    # of 1,000 followers; 118 -> 72 us per 800 rows measured.
    return functools.partial(tuple.__new__, row_type)


def cached_named_tuple_factory(colnames: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[Row]:
    """Rows as named tuples, like the driver's ``named_tuple_factory``, but
    with one class per column list instead of a new class per result set
    (which costs ~0.1 ms, measured: 2 ms of CPU for a 20-tweet page)."""
    return list(map(_row_maker(tuple(colnames)), rows))


# --- connecting ---------------------------------------------------------------


def connect(settings: StorageSettings, connection_class: type[Any] | None = None) -> Session:
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
    connection_class = connection_class or _Connection
    if settings.protocol_version < ProtocolVersion.V5:
        return _connect(settings, ProtocolVersion.V4, connection_class)
    try:
        return _connect(settings, ProtocolVersion.V5, connection_class)
    except _ProtocolTooNew:
        return _connect(settings, ProtocolVersion.V4, connection_class)


class _ProtocolTooNew(Exception):
    pass


def _connect(settings: StorageSettings, protocol_version: int, connection_class: Any) -> Session:
    profile = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=settings.local_dc)),
        consistency_level=READ_CL,
        serial_consistency_level=SERIAL_CL,
        request_timeout=settings.request_timeout_s,
        row_factory=cached_named_tuple_factory,
    )
    kwargs: dict[str, Any] = {}
    if connection_class is not None:
        kwargs["connection_class"] = connection_class
    cluster: Cluster | None = None
    try:
        cluster = Cluster(
            contact_points=list(settings.cassandra_hosts),
            port=settings.cassandra_port,
            protocol_version=protocol_version,
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            connect_timeout=min(10.0, settings.request_timeout_s),
            control_connection_timeout=settings.request_timeout_s,
            reconnection_policy=ExponentialReconnectionPolicy(
                policies.CASSANDRA_RECONNECT.base_delay_s, policies.CASSANDRA_RECONNECT.max_delay_s
            ),
            # Client encryption and PasswordAuthenticator credentials (engine_security).
            **settings.security.cluster_kwargs(),
            **kwargs,
        )
        session = cluster.connect()
        _NodeGauge.watch(cluster)
        return session
    except Exception as exc:
        if cluster is not None:
            cluster.shutdown()
        if (
            isinstance(exc, NoHostAvailable)
            and protocol_version > ProtocolVersion.V4
            and any(
                isinstance(e, ProtocolVersionUnsupported) or "protocol version" in str(e).lower() for e in exc.errors.values()
            )
        ):
            raise _ProtocolTooNew() from exc
        if isinstance(exc, (NoHostAvailable, DriverException, OSError)):
            raise Unavailable(f"cassandra unreachable at {_contact(settings)}: {exc}") from exc
        raise


class _NodeGauge(HostStateListener):  # type: ignore[misc]
    """Keeps ``fanline_cassandra_node_up{node}`` at 1/0 as the driver marks
    nodes up and down (its control connection and pools notice within
    seconds), so the dashboards show each node's health without an exporter."""

    @classmethod
    def watch(cls, cluster: Cluster) -> None:
        for host in cluster.metadata.all_hosts():
            metrics.CASSANDRA_NODE_UP.labels(host.address).set(1 if host.is_up is not False else 0)
        cluster.register_listener(cls())

    def on_up(self, host: Any) -> None:
        metrics.CASSANDRA_NODE_UP.labels(host.address).set(1)

    def on_down(self, host: Any) -> None:
        metrics.CASSANDRA_NODE_UP.labels(host.address).set(0)

    def on_add(self, host: Any) -> None:
        metrics.CASSANDRA_NODE_UP.labels(host.address).set(1 if host.is_up is not False else 0)

    def on_remove(self, host: Any) -> None:
        metrics.CASSANDRA_NODE_UP.remove(host.address)


def _contact(settings: StorageSettings) -> str:
    return ",".join(f"{h}:{settings.cassandra_port}" for h in settings.cassandra_hosts)


async def open_session(settings: StorageSettings) -> Session:
    """``connect`` without blocking the event loop (whose thread serves the
    connections when ``settings.reactor`` is ``"loop"``)."""
    loop_class = LoopConnection.for_loop(asyncio.get_running_loop()) if settings.reactor == "loop" else None
    return await asyncio.to_thread(connect, settings, loop_class)


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
    serving = session.cluster.connection_class
    if issubclass(serving, LoopConnection) and serving.on_loop():
        # The answer could only be read by this very thread: it would wait forever.
        raise RuntimeError("prepare blocks: call it through asyncio.to_thread, not on the session's event loop")
    stmt = session.prepare(cql)
    stmt.consistency_level = WRITE_CL if write else READ_CL
    stmt.serial_consistency_level = SERIAL_CL
    stmt.is_idempotent = idempotent
    stmt.fetch_size = FETCH_SIZE
    return stmt
