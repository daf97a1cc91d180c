"""Domain errors in Mastodon's shape, at the ``/api`` and ``/oauth`` edge only.

Mastodon answers ``{"error": "<message>"}`` (``Api::BaseController``), with
fixed texts for the cases clients recognise: ``404`` "Record not found",
``401`` "The access token is invalid", ``403`` "This action is outside the
authorized scopes", ``422`` "This method requires an authenticated user" for
an app's token where a user's is needed. The OAuth endpoints answer RFC 6749's
``{"error": "<code>", "error_description": "<message>"}``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import RedirectResponse, Response

from fanline_shared import metrics
from fanline_shared.errors import DomainError, NotFound, RateLimited, Unavailable, status_of
from fanline_shared.http_routes import CLIENT_CLOSED_REQUEST, json_response

from ..principal import InsufficientScope, NotAUser

log = logging.getLogger(__name__)
Handler = Callable[[Request], Awaitable[Response]]

RECORD_NOT_FOUND = "Record not found"
INVALID_TOKEN = "The access token is invalid"
OUTSIDE_SCOPES = "This action is outside the authorized scopes"
NEEDS_USER = "This method requires an authenticated user"
# RFC 6749 error codes social-graph's OAuth errors carry as their code.
OAUTH_CODES = {"invalid_client", "invalid_grant", "invalid_scope", "invalid_request", "unsupported_grant_type"}


def body(message: str, **extra: Any) -> dict[str, Any]:
    return {"error": message, **extra}


def mastodon_error(error: DomainError) -> Response:
    """A domain error as Mastodon answers it."""
    status = status_of(error)
    headers = dict(getattr(error, "headers", None) or {})
    retry_after = getattr(error, "retry_after", None)
    if retry_after is not None and isinstance(error, RateLimited | Unavailable):
        headers["Retry-After"] = str(retry_after)
    if isinstance(error, NotAUser):
        return json_response(body(NEEDS_USER), 422, headers)
    if isinstance(error, InsufficientScope):
        return json_response(body(OUTSIDE_SCOPES), 403, headers)
    if status == 401:
        return json_response(body(INVALID_TOKEN), 401, headers)
    if isinstance(error, NotFound):
        return json_response(body(RECORD_NOT_FOUND), 404, headers)
    details = getattr(error, "details", None)
    extra = {"details": details} if details else {}
    return json_response(body(error.message, **extra), status, headers)


def oauth_error(error: DomainError) -> Response:
    """A domain error as an OAuth endpoint answers it (RFC 6749 5.2)."""
    if isinstance(error, RateLimited | Unavailable):
        return mastodon_error(error)
    status = status_of(error)
    code = error.code if error.code in OAUTH_CODES else ("invalid_client" if status == 401 else "invalid_request")
    if code == "invalid_scope" or status in (409, 422):
        status = 400
    headers = {"WWW-Authenticate": 'Basic realm="fanline"'} if status == 401 else {}
    return json_response({"error": code, "error_description": error.message}, status, headers)


def mastodon(handler: Handler, *, render: Callable[[DomainError], Response] = mastodon_error) -> Handler:
    """``handler`` with its domain errors in Mastodon's shape (outermost, so
    the deadline's 503 is shaped too)."""

    async def run(request: Request) -> Response:
        try:
            return await handler(request)
        except DomainError as exc:
            return render(exc)

    return run


async def not_found(request: Request) -> Response:
    """Any other path under ``/api``: Mastodon's 404 (not the ``/v1`` body) —
    but a path with a trailing slash is sent to the one without (307, the
    method and body kept): Mastodon.py asks for ``/api/v1/instance/``."""
    started = time.perf_counter()
    path = request.url.path
    try:
        if path.endswith("/") and len(path) > 5:
            query = request.url.query
            response: Response = RedirectResponse(path.rstrip("/") + (f"?{query}" if query else ""), status_code=307)
        else:
            response = json_response(body(RECORD_NOT_FOUND), 404)
    except ClientDisconnect:
        response = Response(status_code=CLIENT_CLOSED_REQUEST)
    metrics.HTTP_REQUESTS.labels("api", request.method, "/api/{rest}", str(response.status_code)).inc()
    metrics.HTTP_LATENCY.labels("api", request.method, "/api/{rest}").observe(time.perf_counter() - started)
    return response
