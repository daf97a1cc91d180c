"""Entry point: ``fanline-api`` (or ``python -m fanline_api``).

With ``FANLINE_HOSTED_SERVICES`` (say ``social-graph,tweet-store``) the same
process also runs those storage services, each from its own entry point's
settings and app, on its own port; the gateway's calls to them stay in the
process (``fanline_shared.colocation``).
"""

from __future__ import annotations

import importlib
import os

from fanline_shared import logs
from fanline_shared.colocation import Part, serve_together
from fanline_shared.http_server import serve

from .config import Settings

# The hostable services' entry points (each names its ``SERVICE``).
ENTRY_POINTS = {"social-graph": "fanline_social_graph.__main__", "tweet-store": "fanline_tweet_store.__main__"}


def hosted_part(name: str) -> Part:
    """``name``'s app as its own process would serve it, from the same environment."""
    entry = importlib.import_module(ENTRY_POINTS[name])
    logs.name_hosted_package(ENTRY_POINTS[name].partition(".")[0], name)  # its log lines say ``name``
    service = entry.SERVICE
    settings = service.settings.from_env(os.environ)
    return Part(name, service.create_app(settings), settings.http)


def main() -> None:
    settings = Settings.from_env(os.environ)
    # The storage services first: their entry points load cassandra-driver
    # the way they always do (fanline_shared.driver_sources).
    hosted = [hosted_part(name) for name in settings.hosted_services]
    from .app import SERVICE, create_app

    if hosted:
        serve_together(Part(SERVICE, create_app(settings), settings.http), hosted)
    else:
        serve(create_app(settings), settings.http, SERVICE)


if __name__ == "__main__":
    main()
