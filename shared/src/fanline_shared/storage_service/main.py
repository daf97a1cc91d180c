"""``StorageService``: one storage service's entry point.

``fanline-<service>`` serves the internal HTTP API; ``fanline-<service>
migrate`` creates or migrates the service's schema and exits (the compose
``cassandra-init`` jobs, the k8s migrate jobs, ``fanline migrate`` and
operators use it). Each service's ``__main__`` only names its ``SERVICE``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from .. import driver_sources
from ..http_server import configure_logging, serve
from .settings import StorageServiceSettings
from .storage import ServiceStorage

# Each service's entry point imports this module before its app, so this runs
# before anything imports cassandra-driver (fanline_shared.driver_sources).
driver_sources.prefer_sources()

C = TypeVar("C", bound=StorageServiceSettings)


@dataclass(frozen=True)
class StorageService(Generic[C]):
    """A storage service: its settings class, its storage and its app."""

    settings: type[C]
    open_storage: Callable[[C], ServiceStorage]
    create_app: Callable[[C], Any]

    @property
    def name(self) -> str:
        return self.settings.SERVICE

    async def migrate(self, settings: C) -> None:
        """Create or migrate the schema (``start`` is idempotent) and
        disconnect; whatever ``FANLINE_SCHEMA_AT_START`` says, this migrates."""
        storage = self.open_storage(replace(settings, storage=replace(settings.storage, schema_at_start="migrate")))
        await storage.start()
        await storage.close()

    async def migrate_from_env(self, environ: Mapping[str, str]) -> str:
        """``migrate`` with the settings in ``environ``; returns the backend."""
        settings = self.settings.from_env(environ)
        await self.migrate(settings)
        return settings.storage.backend

    def main(self, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> None:
        """``fanline-<service> [migrate]``."""
        args = list(sys.argv[1:] if argv is None else argv)
        settings = self.settings.from_env(os.environ if environ is None else environ)
        if args == ["migrate"]:
            configure_logging(self.name)
            asyncio.run(self.migrate(settings))
            print(f"{self.name}: schema up to date ({settings.storage.backend})")
            return
        if args:
            sys.exit(f"usage: fanline-{self.name} [migrate]")
        serve(self.create_app(settings), settings.http, self.name)
