"""Structured logs and the request id (fanline_shared.logs): JSON lines that
carry the bound request id, whichever API logged them; the middleware keeps a
well-formed incoming id and replaces anything else; the id survives the
outbox JSON and the Kafka headers."""

from __future__ import annotations

import io
import logging
import uuid

import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient
from structlog.contextvars import bound_contextvars

from fanline_shared import events, logs
from fanline_shared.config import ConfigError, Env, LogSettings
from fanline_shared.domain import utcnow
from fanline_shared.outbox.wire import event_from_json, event_to_json


@pytest.fixture
def captured():
    """Logging configured as a service does it, into a buffer."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    logs.configure_logging("test-service", "json", "INFO")
    stream = io.StringIO()
    root.handlers[0].setStream(stream)  # type: ignore[attr-defined]
    yield stream
    root.handlers[:], _ = saved
    root.setLevel(saved[1])


def lines(stream: io.StringIO) -> list[dict]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_stdlib_and_structlog_lines_are_json_with_the_bound_request_id(captured):
    with bound_contextvars(request_id="req-123"):
        logging.getLogger("plain").warning("outbox ack to %s failed", "tweet-store")
        logs.get_logger("structured").info("fanout.written", rows=3)
    logging.getLogger("plain").info("unbound")
    first, second, third = lines(captured)
    assert first["event"] == "outbox ack to tweet-store failed"
    assert first["request_id"] == "req-123" and first["level"] == "warning" and first["service"] == "test-service"
    assert second["event"] == "fanout.written" and second["rows"] == 3 and second["request_id"] == "req-123"
    assert second["logger"] == "structured" and "timestamp" in second
    assert "request_id" not in third


def test_a_hosted_services_lines_name_it(captured, monkeypatch):
    # One process for the gateway and the stores (fanline_shared.colocation).
    monkeypatch.setattr(logs, "_HOSTED_PACKAGES", {})
    logs.name_hosted_package("fanline_tweet_store", "tweet-store")
    logging.getLogger("fanline_tweet_store.app").warning("stored")
    logs.get_logger("fanline_tweet_store.home_writes").info("home.rows_written", rows=2)
    logging.getLogger("fanline_api.gateway").warning("posted")
    stored, written, posted = lines(captured)
    assert stored["service"] == "tweet-store" and written["service"] == "tweet-store"
    assert posted["service"] == "test-service"


def test_console_format_and_bad_settings():
    assert "request_id=r1" in _render_console()
    assert LogSettings.from_env(Env({})) == LogSettings("INFO", "json")
    assert LogSettings.from_env(Env({"FANLINE_LOG_FORMAT": "console", "FANLINE_LOG_LEVEL": "debug"})) == LogSettings(
        "DEBUG", "console"
    )
    with pytest.raises(ConfigError, match="FANLINE_LOG_FORMAT"):
        LogSettings.from_env(Env({"FANLINE_LOG_FORMAT": "xml"}))
    with pytest.raises(ConfigError, match="FANLINE_LOG_LEVEL"):
        LogSettings.from_env(Env({"FANLINE_LOG_LEVEL": "loud"}))


def _render_console() -> str:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logs.configure_logging("svc", "console", "INFO")
        stream = io.StringIO()
        root.handlers[0].setStream(stream)  # type: ignore[attr-defined]
        with bound_contextvars(request_id="r1"):
            logs.get_logger("x").info("hello", n=1)
        return stream.getvalue()
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])


@pytest.mark.parametrize(
    "value, ok",
    [
        ("0123456789abcdef0123456789abcdef", True),
        ("6f1c2a1e-8e4b-4c57-a9a3-0f0d3f6b7a10", True),
        ("lb:req.42_x", True),
        ("", False),
        ("a" * 65, False),
        ("has space", False),
        ("line\nbreak", False),
        ('{"json":1}', False),
        ("é", False),
    ],
)
def test_well_formed_request_ids(value, ok):
    assert (logs.valid_request_id(value) == value) is ok
    assert (logs.valid_request_id(value.encode()) == value) is ok


def _echo_app() -> TestClient:
    async def echo(_: Request) -> JSONResponse:
        return JSONResponse({"bound": logs.current_request_id(), "forwarded": logs.request_id_headers()})

    app = Starlette(routes=[Route("/", echo)])
    app.add_middleware(logs.RequestIdMiddleware)
    return TestClient(app)


def test_middleware_keeps_a_well_formed_id_and_forwards_it():
    client = _echo_app()
    response = client.get("/", headers={"X-Request-Id": "client-42"})
    assert response.headers["x-request-id"] == "client-42"
    assert response.json() == {"bound": "client-42", "forwarded": {"x-request-id": "client-42"}}
    assert logs.current_request_id() is None  # unbound after the request


@pytest.mark.parametrize("incoming", [None, "bad id with spaces", "x" * 200])
def test_middleware_replaces_a_missing_or_malformed_id(incoming):
    client = _echo_app()
    headers = {"X-Request-Id": incoming} if incoming is not None else {}
    response = client.get("/", headers=headers)
    made = response.headers["x-request-id"]
    assert made != incoming and logs.valid_request_id(made) == made and len(made) == 32
    assert response.json()["bound"] == made


def test_events_record_the_bound_id_and_keep_it_through_json_and_kafka_headers():
    assert events.tweet_created(uuid.uuid1(), "ada", utcnow()).request_id is None
    with bound_contextvars(request_id="post-7"):
        event = events.tweet_created(uuid.uuid1(), "ada", utcnow())
    assert event.request_id == "post-7"
    assert event_from_json(event_to_json(event)) == event
    headers = logs.kafka_headers(event.request_id)
    assert headers == [("x-request-id", b"post-7")]
    assert logs.request_id_from_kafka(headers) == "post-7"
    assert logs.request_id_from_kafka([(b"X-Request-Id", b"post-7")]) == "post-7"
    assert logs.request_id_from_kafka({"x-request-id": b"post-7"}) == "post-7"
    assert logs.request_id_from_kafka([("x-request-id", b"bad id")]) is None
    assert logs.request_id_from_kafka(None) is None and logs.kafka_headers(None) is None
    # A forged id in the outbox JSON is dropped, not trusted.
    assert event_from_json({**event_to_json(event), "request_id": "a b"}).request_id is None


def test_calls_below_the_level_run_no_processor():
    """``LevelFirstLogger`` asks the level first: a dropped ``info`` or
    ``debug`` builds no event dict (filter_by_level would drop it too, later)."""
    import logging

    import structlog

    seen: list[str] = []

    def counting(_logger, name, event):
        seen.append(name)
        return event

    logger = logging.getLogger("test.level_first")
    logger.setLevel(logging.WARNING)
    bound = logs.LevelFirstLogger(logger, [counting, structlog.stdlib.filter_by_level, lambda *_: ""], {})
    assert bound.info("dropped", n=1) is None and bound.debug("dropped too") is None
    assert seen == []
    bound.warning("kept")
    assert seen == ["warning"]
