"""The internal outbox API every owning service serves to the relay and the
fan-out worker (``client.py`` is its caller's side)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..domain import utcnow
from ..errors import BadRequest, Conflict
from ..http_routes import json_response, read_json_object, route
from .ports import AppliedAckOutbox, Outbox
from .wire import event_to_json


def outbox_routes(service: str, get_outbox: Callable[[Request], Outbox]) -> list[Route]:
    """The internal outbox API every owning service serves to the relay."""

    async def pending(request: Request) -> Response:
        try:
            older_than_ms = int(request.query_params.get("older_than_ms", "3000"))
            limit = min(int(request.query_params.get("limit", "500")), 5000)
        except ValueError:
            raise BadRequest("older_than_ms and limit must be integers") from None
        events = await get_outbox(request).pending(utcnow() - timedelta(milliseconds=older_than_ms), limit)
        return json_response({"items": [event_to_json(e) for e in events]})

    async def read_ids(request: Request) -> list[uuid.UUID]:
        body = await read_json_object(request, max_bytes=4 * 1024 * 1024)
        raw = body.get("ids", [])
        if not isinstance(raw, list):
            raise BadRequest("ids must be a list of UUIDs")
        try:
            return [uuid.UUID(str(i)) for i in raw]
        except ValueError:
            raise BadRequest("ids must be UUIDs") from None

    def applied_mode(request: Request) -> AppliedAckOutbox:
        outbox = get_outbox(request)
        if not (hasattr(outbox, "mark_published") and hasattr(outbox, "replay")):
            raise Conflict(
                "this outbox deletes events once the broker has them; FANLINE_OUTBOX_ACK=applied needs the embedded backend",
                code="outbox_mode_unsupported",
            )
        return outbox  # type: ignore[return-value]

    async def ack(request: Request) -> Response:
        await get_outbox(request).ack(await read_ids(request))
        return Response(status_code=204)

    async def mark_published(request: Request) -> Response:
        outbox = applied_mode(request)
        await outbox.mark_published(await read_ids(request))
        return Response(status_code=204)

    async def replay(request: Request) -> Response:
        return json_response({"replayed": await applied_mode(request).replay()})

    def lease_holder(value: object) -> str:
        if not isinstance(value, str) or not 1 <= len(value) <= MAX_HOLDER or not value.isprintable():
            raise BadRequest(f"holder must be 1-{MAX_HOLDER} printable characters", code="invalid_holder")
        return value

    async def acquire_lease(request: Request) -> Response:
        body = await read_json_object(request)
        ttl_s = body.get("ttl_s")
        if not isinstance(ttl_s, int) or isinstance(ttl_s, bool) or not 1 <= ttl_s <= MAX_LEASE_S:
            raise BadRequest(f"ttl_s must be an integer 1-{MAX_LEASE_S}", code="invalid_ttl")
        held = await get_outbox(request).acquire_lease(lease_holder(body.get("holder")), ttl_s)
        return json_response({"held": held})

    async def release_lease(request: Request) -> Response:
        await get_outbox(request).release_lease(lease_holder(request.query_params.get("holder")))
        return Response(status_code=204)

    return [
        route(service, "/internal/outbox", pending, ["GET"]),
        route(service, "/internal/outbox/ack", ack, ["POST"]),
        route(service, "/internal/outbox/published", mark_published, ["POST"]),
        route(service, "/internal/outbox/replay", replay, ["POST"]),
        route(service, "/internal/outbox/lease", acquire_lease, ["POST"]),
        route(service, "/internal/outbox/lease", release_lease, ["DELETE"]),
    ]


MAX_HOLDER = 200
MAX_LEASE_S = 3600
