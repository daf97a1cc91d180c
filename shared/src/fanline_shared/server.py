"""Running a service: logging set-up and uvicorn with uvloop."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, Protocol

import uvicorn

from .config import HttpSettings


def configure_logging(service: str) -> None:
    level = os.environ.get("FANLINE_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(
        level=level,
        format=f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s",
    )
    # The driver and Kafka clients are chatty at INFO.
    for noisy in ("cassandra", "aiokafka", "kafka", "aiohttp"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))


def serve(app: Any, http: HttpSettings, service: str) -> None:
    """Serve ``app`` until SIGINT/SIGTERM; uvicorn runs the lifespan."""
    configure_logging(service)
    uvicorn.run(
        app,
        host=http.host,
        port=http.port,
        loop="uvloop",
        # httptools (C) parses requests for a fraction of h11's (pure Python) CPU.
        http="httptools",
        access_log=False,
        log_level="warning",
        timeout_graceful_shutdown=10,
        # Longer than any client's idle keep-alive (peers: 15 s), so the client
        # always closes an idle connection first; equal timeouts race and a
        # request sent on a connection the server is closing fails.
        timeout_keep_alive=75,
        lifespan="on",
    )


class Storage(Protocol):
    async def start(self) -> None: ...
    async def close(self) -> None: ...


async def migrate_storage(storage: Storage) -> None:
    """Create or migrate a service's schema (``start`` is idempotent) and disconnect."""
    await storage.start()
    await storage.close()


def storage_service_main(service: str, http: HttpSettings, backend: str, build_storage: Callable[[], Storage],
                         create_app: Callable[[], Any], argv: list[str]) -> None:
    """Entry point of a storage-owning service: ``fanline-<service>`` serves its
    internal API; ``fanline-<service> migrate`` applies its schema and exits."""
    if argv == ["migrate"]:
        configure_logging(service)
        asyncio.run(migrate_storage(build_storage()))
        print(f"{service}: schema up to date ({backend})")
        return
    if argv:
        sys.exit(f"usage: fanline-{service} [migrate]")
    serve(create_app(), http, service)
