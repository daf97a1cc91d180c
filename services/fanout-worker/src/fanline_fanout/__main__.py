"""Entry point: ``fanline-fanout-worker`` (or ``python -m fanline_fanout``).

Creates the topics explicitly (waiting for the broker), then runs the faust
worker until SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import faust
import uvloop

from fanline_shared import logs
from fanline_shared.colocation import hosted_part
from fanline_shared.config import Env, LogSettings
from fanline_shared.errors import Unavailable
from fanline_shared.kafka import ensure_topics
from fanline_shared.policies import RetryPolicy, retry

from .app import SERVICE, create_app
from .config import Settings

log = logging.getLogger(__name__)
WAIT_FOR_BROKER = RetryPolicy("wait_for_broker", attempts=None, base_delay_s=0.5, max_delay_s=5.0)


class Worker(faust.Worker):
    """faust's worker without its terminal progress spinner.

    At a log level of WARN or above faust adds a handler that spins the
    spinner on every log record and sets the *root* logger to DEBUG for it
    (``faust.Worker._setup_spinner_handler``): every debug and info call of
    every library, and of ours, then built its record, ran structlog's
    processors and wrote terminal escape codes to the log, whatever
    ``FANLINE_LOG_LEVEL`` said. A service's output is its log, not a
    terminal."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spinner = None


def main() -> None:
    settings = Settings.from_env(os.environ)
    log_settings = LogSettings.from_env(Env(os.environ))
    logs.configure_logging(SERVICE, log_settings.format, log_settings.level)
    counts = asyncio.run(retry(WAIT_FOR_BROKER, lambda: ensure_topics(settings.kafka), retry_on=(Unavailable,)))
    log.info("topics ready: %s", counts)
    settings.data_dir.mkdir(parents=True, exist_ok=True)  # faust creates only the last level
    # FANLINE_HOSTED_SERVICES: the stores this worker writes through, in its process.
    app = create_app(settings, [hosted_part(name, os.environ) for name in settings.hosted_services])
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    # faust (mode) sets logging up again when the worker starts: give it the
    # same structured configuration (a fresh dict: dictConfig consumes it).
    worker = Worker(
        app,
        loglevel=log_settings.level.lower(),
        logging_config=logs.logging_config(SERVICE, log_settings.format, log_settings.level),
    )
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
