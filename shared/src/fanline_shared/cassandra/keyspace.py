"""One owning service's keyspace and the repositories over it.

``Keyspace`` is the ``Lifecycle`` port: ``start`` connects, migrates and
prepares every registered repository's statements; ``close`` shuts the
cluster down; ``ping`` runs a trivial query. ``Repository`` is the base of a
repository over one ``Keyspace``. ``drop_keyspace`` is for tests and tooling.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from cassandra import DriverException
from cassandra.cluster import NoHostAvailable, Session

from ..config import StorageSettings
from ..errors import Unavailable
from ..storage_service.schema import Migration, compose
from .bridge import execute
from .callbacks import _is_validation_error
from .connection import close_session, open_session
from .migrations import _check_identifier, migrate, wait_for_version
from .outbox import OUTBOX_MIGRATIONS, CassandraOutbox


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
    """The lifecycle of one owning service's keyspace (the ``Lifecycle`` port),
    outbox included.

    ``start`` connects, migrates (or, with ``FANLINE_SCHEMA_AT_START=wait``,
    waits for the schema version its migrations reach) and then calls every registered ``prepare``
    callback (on a worker thread: preparing blocks) so repositories prepare
    their statements once; ``close`` shuts the cluster down; ``ping`` runs a
    trivial query. Repositories read ``session`` on every call.
    """

    def __init__(self, settings: StorageSettings, owner: str, migrations: Sequence[Migration]) -> None:
        self.settings = settings
        self.name = settings.keyspace(owner)
        # The owner's own migrations and its outbox's, in one positional list.
        self.migrations = compose(migrations, OUTBOX_MIGRATIONS)
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
                if self.settings.schema_at_start == "wait":
                    await wait_for_version(session, self.name, len(self.migrations), self.settings.schema_wait_s)
                else:
                    await migrate(
                        session, self.name, self.settings.replication_factor, self.migrations, local_dc=self.settings.local_dc
                    )
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
        box = CassandraOutbox(self.name, recheck_empty_s=self.settings.outbox_recheck_s)
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
