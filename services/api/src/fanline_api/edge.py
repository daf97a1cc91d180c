"""The public edge: the internal protocol's control headers never come in from outside.

Every ``X-Fanline-*`` request header is a control signal between Fanline's
own services: the priority of background work (``http_client.PRIORITY_HEADER``),
the caller's timeout (``http_client.TIMEOUT_HEADER``), the service credential
(``internal_auth.HEADER``). A public client must not be able to send one, so
the gateway removes them all before anything reads a header -- admission
control included: a client marking its requests as background work is
admitted, or shed, like any other. (The storage services honour the mark
only on requests that carry the service credential, ``admission.py``.)
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

INTERNAL_PREFIX = b"x-fanline-"  # ASGI header names are lower-case bytes


class StripInternalHeaders:
    """ASGI middleware (outermost): drops every ``X-Fanline-*`` request header."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = scope.get("headers") or []
            if any(name.startswith(INTERNAL_PREFIX) for name, _ in headers):
                scope = {**scope, "headers": [(n, v) for n, v in headers if not n.startswith(INTERNAL_PREFIX)]}
        await self.app(scope, receive, send)
