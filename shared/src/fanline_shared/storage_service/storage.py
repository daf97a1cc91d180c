"""A storage service's storage: its lifecycle and the backend registry.

Each service's storage is a dataclass of its repositories (behind its own
ports), its outbox and its ``engine``; ``StorageLifecycle`` gives it
``start``/``close``/``ping`` through that engine. ``Backends`` names the
adapter module that builds it for each ``FANLINE_BACKEND``; a module is
imported only when chosen, so the embedded default never loads the
Cassandra driver.
"""

from __future__ import annotations

import importlib
from typing import Any, Generic, Protocol, TypeVar

from ..config import StorageSettings
from ..outbox.ports import Outbox


class Lifecycle(Protocol):
    """A storage engine as its service sees it (``SqliteEngine``, a Cassandra ``Keyspace``)."""

    async def start(self) -> None:
        """Connect and create or migrate the schema (idempotent)."""

    async def close(self) -> None:
        """Release connections; safe to call twice."""

    async def ping(self) -> None:
        """Raise ``Unavailable`` unless the engine answers a trivial query now."""


class ServiceStorage(Protocol):
    """What the kit needs of a service's storage."""

    outbox: Outbox

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def ping(self) -> None: ...


class StorageLifecycle:
    """Mixin of a service's storage dataclass, which declares ``engine``."""

    engine: Lifecycle

    async def start(self) -> None:
        """Connect and create or migrate the schema (idempotent)."""
        await self.engine.start()

    async def close(self) -> None:
        """Release connections; safe to call twice."""
        await self.engine.close()

    async def ping(self) -> None:
        """Raise ``Unavailable`` unless the engine answers now."""
        await self.engine.ping()


S = TypeVar("S")


class Backends(Generic[S]):
    """The adapter module of each backend, relative to ``package``; each
    defines ``build(settings, ...)`` returning the service's storage."""

    def __init__(self, package: str, *, embedded: str, cassandra: str) -> None:
        self._package = package
        self._modules = {"embedded": embedded, "cassandra": cassandra}

    def build(self, settings: StorageSettings, *args: Any, **kwargs: Any) -> S:
        """The storage for ``settings.backend`` (not yet started)."""
        module = self._modules.get(settings.backend)
        if module is None:
            raise ValueError(f"unknown storage backend {settings.backend!r}")
        return importlib.import_module(module, self._package).build(settings, *args, **kwargs)  # type: ignore[no-any-return]
