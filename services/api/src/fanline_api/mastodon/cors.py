"""CORS for browser-based clients (Elk, Phanpy), on the API paths only —
``/api/*``, ``/oauth/token``, ``/oauth/revoke`` and ``/.well-known/*`` (as
Mastodon's config/initializers/cors.rb) — never on the web pages, which keep
their same-origin policy. Starlette's ``CORSMiddleware`` does the work; this
wrapper only picks the paths. Credentials are bearer tokens, never cookies,
so any origin may call."""

from __future__ import annotations

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

PATHS = ("/api/", "/.well-known/")
EXACT = ("/oauth/token", "/oauth/revoke")
EXPOSED = ["Link", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-Request-Id", "Retry-After"]


def cors_path(path: str) -> bool:
    return path.startswith(PATHS) or path in EXACT


class ApiCorsMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.cors = CORSMiddleware(
            app,
            allow_origins=["*"],
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
            allow_headers=["*"],
            expose_headers=EXPOSED,
            max_age=86400,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and cors_path(scope["path"]):
            await self.cors(scope, receive, send)
        else:
            await self.app(scope, receive, send)
