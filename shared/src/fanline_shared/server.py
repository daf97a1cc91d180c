"""Running a service: logging set-up and uvicorn with uvloop."""

from __future__ import annotations

import logging
import os
from typing import Any

import uvicorn

from .config import HttpSettings


def configure_logging(service: str) -> None:
    level = os.environ.get("FANLINE_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(
        level=level,
        format=f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s",
    )
    # The driver and Kafka clients are chatty at INFO.
    for noisy in ("cassandra", "aiokafka", "kafka", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))


def serve(app: Any, http: HttpSettings, service: str) -> None:
    """Serve ``app`` until SIGINT/SIGTERM; uvicorn runs the lifespan."""
    configure_logging(service)
    uvicorn.run(
        app,
        host=http.host,
        port=http.port,
        loop="uvloop",
        http="h11",
        access_log=False,
        log_level="warning",
        timeout_graceful_shutdown=10,
        # Longer than any client's idle keep-alive (httpx: 5 s), so the client
        # always closes an idle connection first; equal timeouts race and a
        # request sent on a connection the server is closing fails.
        timeout_keep_alive=75,
        lifespan="on",
    )
