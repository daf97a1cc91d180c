"""Entry point: ``fanline-fanout-worker`` (or ``python -m fanline_fanout``).

Creates the topics explicitly (waiting for the broker), then runs the faust
worker until SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import logging
import os

import faust
import uvloop

from fanline_shared.errors import Unavailable
from fanline_shared.kafka import ensure_topics
from fanline_shared.policies import RetryPolicy, retry
from fanline_shared.server import configure_logging

from .app import SERVICE, create_app
from .config import Settings

log = logging.getLogger(__name__)
WAIT_FOR_BROKER = RetryPolicy("wait_for_broker", attempts=None, base_delay_s=0.5, max_delay_s=5.0)


def main() -> None:
    settings = Settings.from_env(os.environ)
    configure_logging(SERVICE)
    counts = asyncio.run(retry(WAIT_FOR_BROKER, lambda: ensure_topics(settings.kafka), retry_on=(Unavailable,)))
    log.info("topics ready: %s", counts)
    settings.data_dir.mkdir(parents=True, exist_ok=True)  # faust creates only the last level
    app = create_app(settings)
    level = os.environ.get("FANLINE_LOG_LEVEL", "INFO").lower()
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    worker = faust.Worker(app, loglevel=level)
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
