"""Entry point: ``fanline-social-graph`` (or ``python -m fanline_social_graph``).

``fanline-social-graph``          serve the internal HTTP API
``fanline-social-graph migrate``  create or migrate this service's schema, then exit
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
