"""Entry point: ``fanline-api`` (or ``python -m fanline_api``)."""

from __future__ import annotations

import os

from fanline_shared.http_server import serve

from .app import SERVICE, create_app
from .config import Settings


def main() -> None:
    settings = Settings.from_env(os.environ)
    serve(create_app(settings), settings.http, SERVICE)


if __name__ == "__main__":
    main()
