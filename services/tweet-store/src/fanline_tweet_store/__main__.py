"""Entry point: ``fanline-tweet-store`` (or ``python -m fanline_tweet_store``).

``fanline-tweet-store``          serve the internal HTTP API
``fanline-tweet-store migrate``  create or migrate this service's schema, then exit
                         (the compose ``cassandra-init`` job and operators use it)
"""

from __future__ import annotations

import asyncio
import os
import sys

from fanline_shared.server import configure_logging, serve

from .adapters import build_storage
from .app import SERVICE, create_app
from .config import Settings


async def migrate(settings: Settings) -> None:
    storage = build_storage(settings.storage, home_retention_s=settings.home_retention_s)
    await storage.start()  # start() creates or migrates the schema idempotently
    await storage.close()


def main() -> None:
    settings = Settings.from_env(os.environ)
    args = sys.argv[1:]
    if args == ["migrate"]:
        configure_logging(SERVICE)
        asyncio.run(migrate(settings))
        print(f"{SERVICE}: schema up to date ({settings.storage.backend})")
        return
    if args:
        sys.exit("usage: fanline-tweet-store [migrate]")
    serve(create_app(settings), settings.http, SERVICE)


if __name__ == "__main__":
    main()
