"""Entry point: ``fanline-tweet-store`` (or ``python -m fanline_tweet_store``).

``fanline-tweet-store``          serve the internal HTTP API
``fanline-tweet-store migrate``  create or migrate this service's schema, then exit
                         (the compose ``cassandra-init`` job and operators use it)
"""

from __future__ import annotations

import os
import sys

from fanline_shared.http_server import migrate_storage, storage_service_main

from .app import SERVICE, create_app, open_storage
from .config import Settings


async def migrate(settings: Settings) -> None:
    await migrate_storage(open_storage(settings))


def main() -> None:
    settings = Settings.from_env(os.environ)
    storage_service_main(
        SERVICE,
        settings.http,
        settings.storage.backend,
        lambda: open_storage(settings),
        lambda: create_app(settings),
        sys.argv[1:],
    )


if __name__ == "__main__":
    main()
