"""Structured logs, and the request id that ties one post's steps together.

Every service logs through the standard ``logging`` module *and* structlog;
both end in one ``structlog.stdlib.ProcessorFormatter``, so a line is one JSON
object (``FANLINE_LOG_FORMAT=json``, the default) or one readable line
(``console``, what ``make run`` uses) whichever API wrote it, and every line
carries the context bound with ``structlog.contextvars`` — above all
``request_id``.

How a request id travels (docs/operations.md, "Follow one post"):

* the gateway takes a well-formed incoming ``X-Request-Id`` (else makes one),
  binds it for the request and returns it in the response
  (``RequestIdMiddleware``);
* every internal HTTP call forwards it (``current_request_id``, read by
  ``http_client.PeerClient``), and the owning services bind it the same way;
* an event made while it is bound records it (``events._envelope``); the
  outbox row keeps it, and the publisher sends it as the Kafka header
  ``x-request-id``;
* the fan-out worker binds it from that header while it handles the event
  (and its slices), so its calls to tweet-store carry it again.

structlog rather than hand-written formatting: contextvars binding that
follows asyncio tasks, one processor chain for our and third-party loggers,
and JSON or console rendering from the same events (README, "Dependencies").
"""

from __future__ import annotations

import logging
import logging.config
import os
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson
import structlog
from structlog.contextvars import bound_contextvars, get_contextvars

REQUEST_ID_HEADER = "x-request-id"
# The Kafka message header carrying it (same name as the HTTP header).
KAFKA_REQUEST_ID_HEADER = "x-request-id"
FORMATS = ("json", "console")
# Well-formed: 1-64 characters of letters, digits and ``._:-`` (UUIDs, ULIDs,
# a load balancer's ids). Anything else is replaced, never logged verbatim: a
# client must not be able to write arbitrary text into the logs.
_WELL_FORMED = re.compile(r"[A-Za-z0-9._:-]{1,64}")
# Third-party loggers that are chatty at INFO.
_NOISY = ("cassandra", "aiokafka", "kafka", "aiohttp")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def new_request_id() -> str:
    """32 random hex digits (a UUID4's bits without building the UUID)."""
    return os.urandom(16).hex()


def valid_request_id(value: str | bytes | None) -> str | None:
    """``value`` if it is a well-formed request id, else None."""
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    if value is None or not _WELL_FORMED.fullmatch(value):
        return None
    return value


def current_request_id() -> str | None:
    """The request id bound in this context (request or event), if any."""
    value = get_contextvars().get("request_id")
    return value if isinstance(value, str) else None


def request_id_headers() -> dict[str, str]:
    """The header forwarding the current request id on an internal call."""
    request_id = current_request_id()
    return {REQUEST_ID_HEADER: request_id} if request_id else {}


def kafka_headers(request_id: str | None) -> list[tuple[str, bytes]] | None:
    """Kafka message headers carrying ``request_id`` (None: no headers)."""
    return [(KAFKA_REQUEST_ID_HEADER, request_id.encode())] if request_id else None


def request_id_from_kafka(headers: Any) -> str | None:
    """The well-formed request id among a message's headers (a list of
    ``(name, value)`` pairs, or a mapping as faust gives them), if any."""
    if not headers:
        return None
    pairs = headers.items() if hasattr(headers, "items") else headers
    for name, value in pairs:
        if (name.decode() if isinstance(name, bytes) else str(name)).lower() == KAFKA_REQUEST_ID_HEADER:
            return valid_request_id(value)
    return None


class RequestIdMiddleware:
    """ASGI middleware: bind the request's id for everything it logs and
    calls, and return it as ``X-Request-Id``. A well-formed incoming id is
    kept (a client's, a load balancer's, or the gateway's on an internal
    call); a missing or malformed one is replaced by a fresh id."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        incoming = next((v for k, v in scope.get("headers", ()) if k == REQUEST_ID_HEADER.encode()), None)
        request_id = valid_request_id(incoming) or new_request_id()
        header = (REQUEST_ID_HEADER.encode(), request_id.encode())

        async def send_with_id(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        with bound_contextvars(request_id=request_id):
            await self._app(scope, receive, send_with_id)


def _json(event: Any, **_: Any) -> str:
    return orjson.dumps(event, default=str).decode()


def logging_config(service: str, fmt: str = "json", level: str = "INFO") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` dictionary: the root logger writes to
    stderr through structlog's formatter (also given to faust's worker,
    which sets logging up itself)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}, not {fmt!r}")
    level = level.upper()
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=_json) if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "structlog": {
                "()": structlog.stdlib.ProcessorFormatter,
                "foreign_pre_chain": _pre_chain(service),
                "processors": [
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info if fmt == "json" else _identity,
                    renderer,
                ],
            },
        },
        "handlers": {"default": {"class": "logging.StreamHandler", "formatter": "structlog"}},
        "root": {"level": level, "handlers": ["default"]},
        "loggers": {name: {"level": max(logging.WARNING, logging.getLevelName(level))} for name in _NOISY},
    }


def _identity(_logger: Any, _name: str, event: Any) -> Any:
    return event


# Package -> service, in a process that hosts several (fanline_shared.colocation):
# a line logged by ``fanline_tweet_store.app`` says ``tweet-store`` there too.
_HOSTED_PACKAGES: dict[str, str] = {}


def name_hosted_package(package: str, service: str) -> None:
    """Lines logged by ``package``'s modules are ``service``'s."""
    _HOSTED_PACKAGES[package] = service


def _pre_chain(service: str | None) -> list[Any]:
    def add_service(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
        if _HOSTED_PACKAGES:
            package = str(event.get("logger", "")).partition(".")[0]
            if package in _HOSTED_PACKAGES:
                event.setdefault("service", _HOSTED_PACKAGES[package])
        if service is not None:
            event.setdefault("service", service)
        return event

    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        add_service,
    ]


class LevelFirstLogger(structlog.stdlib.BoundLogger):
    """structlog's stdlib logger, asking the level before building anything.

    The chain's first processor (``filter_by_level``) drops a record below
    the level too, but only after the event dict was built and copied and a
    ``DropEvent`` raised and caught: a ``log.info`` with three fields at
    WARNING cost 3.3 µs that way and 1.5 µs with this check (arguments
    included). The services' hot paths make
    several such calls per request; the answer is the same either way."""

    def debug(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if not self._logger.isEnabledFor(logging.DEBUG):
            return None
        return super().debug(event, *args, **kw)

    def info(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if not self._logger.isEnabledFor(logging.INFO):
            return None
        return super().info(event, *args, **kw)


def _configure_structlog(service: str | None, *, cache: bool) -> None:
    """structlog loggers hand their events to ``logging`` (rendered by the
    root handler's ``ProcessorFormatter``)."""
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_pre_chain(service),
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=LevelFirstLogger,
        cache_logger_on_first_use=cache,
    )


def configure_logging(service: str, fmt: str = "json", level: str = "INFO") -> None:
    """Set up ``logging`` and structlog for ``service``."""
    logging.config.dictConfig(logging_config(service, fmt, level))
    _configure_structlog(service, cache=True)


def get_logger(name: str) -> Any:
    """A structlog logger: ``log.info("fanout.done", rows=12)``."""
    return structlog.stdlib.get_logger(name)


# Until a service configures logging (tests, tools), structlog loggers still
# go through ``logging`` (caplog sees them), uncached so that the service's
# configuration applies once it is made.
_configure_structlog(None, cache=False)
