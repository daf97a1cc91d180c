"""An outbox event as JSON on the internal APIs (outbox routes, the owners'
write answers, which carry the event for the gateway's fast path)."""

from __future__ import annotations

import uuid
from typing import Any

from ..domain import OutboxEvent
from ..logs import valid_request_id


def event_to_json(event: OutboxEvent) -> dict[str, Any]:
    data = {"id": str(event.id), "key": event.key, "payload": event.payload.decode()}
    if event.request_id:
        data["request_id"] = event.request_id
    return data


def event_from_json(data: dict[str, Any]) -> OutboxEvent:
    return OutboxEvent(
        id=uuid.UUID(data["id"]),
        key=data["key"],
        payload=data["payload"].encode(),
        request_id=valid_request_id(data.get("request_id")),
    )
