"""Entry point: ``fanline-social-graph`` (or ``python -m fanline_social_graph``).

``fanline-social-graph``          serve the internal HTTP API
``fanline-social-graph migrate``  create or migrate this service's schema, then exit
                         (the compose ``cassandra-init`` job and operators use it)
"""

from __future__ import annotations

import os
import sys

from fanline_shared.http_server import migrate_storage, storage_service_main

from .adapters import build_storage
from .app import SERVICE, create_app
from .config import Settings


async def migrate(settings: Settings) -> None:
    await migrate_storage(build_storage(settings.storage))


def main() -> None:
    settings = Settings.from_env(os.environ)
    storage_service_main(
        SERVICE,
        settings.http,
        settings.storage.backend,
        lambda: build_storage(settings.storage),
        lambda: create_app(settings),
        sys.argv[1:],
    )


if __name__ == "__main__":
    main()
