"""``SqliteEngine``: the embedded engine of one storage service (the
``Lifecycle`` port over its ``SqliteDatabase``), outbox included."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from ..sqlite import OUTBOX_MIGRATIONS, SqliteDatabase
from .schema import Migration, compose


class SqliteEngine:
    """Opens the service's database and migrates it — its own ``migrations``
    and the outbox's — then awaits ``after_migrate`` (e.g. a purge of
    expired rows), if any."""

    def __init__(
        self, db: SqliteDatabase, migrations: Sequence[Migration], after_migrate: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self.db = db
        self.migrations = compose(migrations, OUTBOX_MIGRATIONS)
        self._after_migrate = after_migrate

    async def start(self) -> None:
        await self.db.open()
        await self.db.migrate(self.migrations)
        if self._after_migrate is not None:
            await self._after_migrate()

    async def close(self) -> None:
        await self.db.close()

    async def ping(self) -> None:
        await self.db.ping()
