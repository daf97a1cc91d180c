"""Entry point: ``fanline-social-graph`` (or ``python -m fanline_social_graph``)."""

from __future__ import annotations

import os

from fanline_shared.server import serve

from .app import SERVICE, create_app
from .config import Settings


def main() -> None:
    settings = Settings.from_env(os.environ)
    serve(create_app(settings), settings.http, SERVICE)


if __name__ == "__main__":
    main()
