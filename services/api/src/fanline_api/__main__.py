"""Entry point: ``fanline-api`` (or ``python -m fanline_api``).

With ``FANLINE_HOSTED_SERVICES`` (say ``social-graph,tweet-store``) the same
process also runs those storage services, each from its own entry point's
settings and app, on its own port; the gateway's calls to them stay in the
process (``fanline_shared.colocation``).
"""

from __future__ import annotations

import os

from fanline_shared.colocation import Part, hosted_part, serve_together
from fanline_shared.http_server import serve

from .config import Settings


def main() -> None:
    settings = Settings.from_env(os.environ)
    # The storage services first: their entry points load cassandra-driver
    # the way they always do (fanline_shared.driver_sources).
    hosted = [hosted_part(name, os.environ) for name in settings.hosted_services]
    from .app import SERVICE, create_app

    if hosted:
        serve_together(Part(SERVICE, create_app(settings), settings.http), hosted)
    else:
        serve(create_app(settings), settings.http, SERVICE)


if __name__ == "__main__":
    main()
