"""Entry point: ``fanline-tweet-store`` (or ``python -m fanline_tweet_store``).

``fanline-tweet-store``          serve the internal HTTP API
``fanline-tweet-store migrate``  create or migrate this service's schema, then exit
(see ``fanline_shared.storage_service.main``)
"""

from __future__ import annotations

from fanline_shared.storage_service.main import StorageService

from .app import create_app, open_storage
from .config import Settings

SERVICE = StorageService(Settings, open_storage, create_app)


def main() -> None:
    SERVICE.main()


if __name__ == "__main__":
    main()
