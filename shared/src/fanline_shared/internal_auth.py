"""Service-to-service authentication of the ``/internal`` routes.

social-graph and tweet-store serve their internal API (users, sessions,
tweets, home timelines, the outbox) only to callers that present the shared
credential ``FANLINE_INTERNAL_TOKEN`` in the ``X-Fanline-Internal-Token``
header: the gateway, the fan-out worker and the operators' CLI, whose peer
clients (``http_client.PeerClient``) send it on every request. Anything else gets
``401 internal_unauthorized`` before any handler runs. The comparison is
constant-time (``hmac.compare_digest``) so response timing reveals nothing of
the token. A service started without a token refuses every internal request
(fail closed) rather than serving them to anyone.

Network isolation is the second layer: the storage services' ports are not
published in docker-compose, and deploy/k8s has NetworkPolicies that admit
only the gateway and the worker. The operations routes (``/healthz``,
``/readyz``, ``/metrics``) stay open for probes and Prometheus.
"""

from __future__ import annotations

import hmac
import logging

from starlette.types import ASGIApp, Receive, Scope, Send

from . import metrics
from .http_routes import error_body, json_response

HEADER = "x-fanline-internal-token"
_HEADER_BYTES = HEADER.encode()
INTERNAL_PREFIX = "/internal"
# The code a peer answers when our credential is missing or wrong: the
# calling service's misconfiguration, never the end user's fault.
CODE = "internal_unauthorized"
log = logging.getLogger(__name__)


def auth_headers(token: str | None) -> dict[str, str]:
    """The header(s) a peer client sends; none without a token."""
    return {HEADER: token} if token else {}


def protected(path: str) -> bool:
    """Whether ``path`` is part of the internal API (needs the credential)."""
    return path == INTERNAL_PREFIX or path.startswith(INTERNAL_PREFIX + "/")


def presents(scope: Scope, token: bytes | None) -> bool:
    """Whether the request in ``scope`` carries ``token`` (never without one:
    a service started without a token refuses every internal request)."""
    if token is None:
        return False
    for name, value in scope.get("headers", ()):
        if name == _HEADER_BYTES:
            return hmac.compare_digest(value, token)
    return False


class InternalAuthMiddleware:
    """ASGI middleware: ``/internal`` requests need the shared credential."""

    def __init__(self, app: ASGIApp, *, token: str | None, service: str) -> None:
        self.app = app
        self._token = token.encode() if token else None
        self._service = service
        if token is None:
            log.error("FANLINE_INTERNAL_TOKEN is not set: %s refuses every /internal request", service)

    def allowed(self, scope: Scope) -> bool:
        return presents(scope, self._token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not protected(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        if not self.allowed(scope):
            metrics.INTERNAL_AUTH_FAILURES.labels(self._service).inc()
            response = json_response(
                error_body(CODE, "this internal API needs the service credential"), 401, {"WWW-Authenticate": "Fanline-Internal"}
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
