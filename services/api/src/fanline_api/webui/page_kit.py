"""What every web page uses: rendering (templates, CSRF, security headers,
errors as pages), the viewer, form reading and ``page``, the route wrapper
that ties them together with the API's request metrics. The pages
themselves are in ``routes.py``."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from starlette.datastructures import FormData
from starlette.formparsers import FormParser, MultiPartException, MultiPartParser
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from fanline_shared import metrics
from fanline_shared.domain import BODY_MAX, LIMIT_DEFAULT, parse_rfc3339, validate_limit
from fanline_shared.errors import BadRequest, DomainError, PayloadTooLarge, Unauthorized, status_of
from fanline_shared.http_routes import MAX_BODY_BYTES

from ..config import Settings
from ..gateway import Gateway
from .security import CSRF_COOKIE, CSRF_FIELD, SESSION_COOKIE, Csrf, clear_cookie, set_cookie

SERVICE = "api"
HERE = Path(__file__).resolve().parent
MAX_FORM_FIELDS = 20
log = logging.getLogger(__name__)

# Everything the pages load comes from this origin; no inline script or style.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

TITLES = {
    400: "That request did not make sense",
    401: "Please sign in",
    403: "Not allowed",
    404: "Not found",
    409: "Already taken",
    413: "Too large",
    422: "Not valid",
    429: "Slow down",
    500: "Something went wrong",
    503: "Temporarily unavailable",
}


@dataclass(frozen=True)
class Viewer:
    """Who is looking: the signed-in username, or None."""

    username: str | None = None
    stale: bool = False  # a session cookie came but signs nobody in any more
    returned_at: str | None = None  # came back after being inactive (the home timeline is regenerated)


def gw(request: Request) -> Gateway:
    return request.app.state.gateway  # type: ignore[no-any-return]


def viewer(request: Request) -> Viewer:
    return getattr(request.state, "viewer", None) or Viewer()


def form(request: Request) -> dict[str, str]:
    return getattr(request.state, "form", None) or {}


def client_address(request: Request) -> str:
    """The client's address as the rate limiter decided it (trusted proxies)."""
    return str(getattr(request.state, "client_address", None) or "unknown")


def require_viewer(request: Request) -> str:
    name = viewer(request).username
    if name is None:
        raise Unauthorized("sign in first", code="unauthorized")
    return name


def redirect(url: str) -> Response:
    response = RedirectResponse(url, status_code=303)
    response.headers.update(SECURITY_HEADERS)
    return response


def safe_next(raw: str | None, default: str = "/") -> str:
    """A local path to go back to, never another site (open redirects)."""
    if not raw or len(raw) > 2000 or not raw.startswith("/") or raw.startswith("//") or "\\" in raw:
        return default
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in raw):
        return default
    return raw


def when(value: str) -> str:
    """``2026-11-22T10:15:30.123456Z`` → ``22 Nov 2026, 10:15 UTC``."""
    try:
        moment = parse_rfc3339(value)
    except (ValueError, TypeError):
        return value
    return f"{moment.day} {moment:%b %Y, %H:%M} UTC"


def paging(request: Request) -> tuple[int, str | None]:
    return validate_limit(request.query_params.get("limit")), request.query_params.get("cursor")


def more_url(path: str, limit: int, next_cursor: str | None) -> str | None:
    """The "More" link of a page: the same list from the opaque next cursor."""
    if not next_cursor:
        return None
    params = {"cursor": next_cursor}
    if limit != LIMIT_DEFAULT:
        params["limit"] = str(limit)
    return f"{path}?{urlencode(params)}"


def plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def user_path(username: str) -> str:
    return "/u/" + quote(username, safe="")


# --- rendering ------------------------------------------------------------------


class Web:
    """Templates, CSRF and the page-level error handling."""

    def __init__(self, settings: Settings) -> None:
        self.csrf = Csrf(settings.cursor_secret)
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,  # everywhere, whatever the template's name
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        env.filters["when"] = when
        env.globals.update(BODY_MAX=BODY_MAX, CSRF_FIELD=CSRF_FIELD, user_path=user_path, plural=plural)
        self.templates = Jinja2Templates(env=env)

    def render(
        self, request: Request, template: str, context: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
    ) -> Response:
        who = viewer(request)
        # The CSRF token is bound to the session cookie the browser will send
        # next; a stale session cookie is cleared below, so bind to none.
        session = None if who.stale else request.cookies.get(SESSION_COOKIE)
        token = request.cookies.get(CSRF_COOKIE)
        fresh = not self.csrf.valid(token, session)
        if fresh or token is None:
            token = self.csrf.mint(session)
        query = request.url.query
        here = request.url.path + (f"?{query}" if query and request.method == "GET" else "")
        ctx = {"request": request, "viewer": who.username, "csrf": token, "here": here, **context}
        response = self.templates.TemplateResponse(
            request, template, ctx, status_code=status, headers={**SECURITY_HEADERS, **(headers or {})}
        )
        if fresh:
            set_cookie(request, response, CSRF_COOKIE, token)
        if who.stale:
            clear_cookie(request, response, SESSION_COOKIE)
        return response

    def error(self, request: Request, status: int, message: str, headers: dict[str, str] | None = None) -> Response:
        title = TITLES.get(status, "Something went wrong")
        return self.render(request, "error.html", {"title": title, "status": status, "message": message}, status, headers)

    def domain_error(self, request: Request, exc: DomainError) -> Response:
        retry_after = getattr(exc, "retry_after", None)
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
        return self.error(request, status_of(exc), exc.message, headers)


async def read_form(request: Request) -> dict[str, str]:
    """The submitted form (first value of each field), at most 64 KiB.

    A body that is not a form reads as an empty form, which then fails the
    CSRF check (403) like any other POST without a token."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            too_large = int(declared) > MAX_BODY_BYTES
        except ValueError:
            raise BadRequest("invalid Content-Length", code="invalid_form") from None
        if too_large:
            raise PayloadTooLarge(f"request body over {MAX_BODY_BYTES // 1024} KiB", code="payload_too_large")

    async def bounded() -> AsyncGenerator[bytes, None]:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise PayloadTooLarge(f"request body over {MAX_BODY_BYTES // 1024} KiB", code="payload_too_large")
            yield chunk

    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    data: FormData
    try:
        if content_type == "application/x-www-form-urlencoded":
            data = await FormParser(request.headers, bounded(), max_fields=MAX_FORM_FIELDS, max_part_size=MAX_BODY_BYTES).parse()
        elif content_type == "multipart/form-data":
            data = await MultiPartParser(
                request.headers, bounded(), max_files=0, max_fields=MAX_FORM_FIELDS, max_part_size=MAX_BODY_BYTES
            ).parse()
        else:
            return {}
    except MultiPartException as exc:
        raise BadRequest(f"malformed form: {exc.message}", code="invalid_form") from None
    fields: dict[str, str] = {}
    for key, value in data.multi_items():
        if isinstance(value, str):
            fields.setdefault(key, value)
    return fields


async def resolve_viewer(request: Request) -> Viewer:
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        return Viewer()
    try:
        username, returned_at = await gw(request).session(f"Bearer {token}")
        return Viewer(username, returned_at=returned_at)
    except Unauthorized:
        return Viewer(stale=True)


PageHandler = Callable[["Web", Request], Awaitable[Response]]


def page(web: Web, path: str, handler: PageHandler, methods: tuple[str, ...] = ("GET",)) -> Route:
    """A web route: form + CSRF check for POSTs, the viewer, errors as pages,
    and the same request metrics as the API routes."""

    async def endpoint(request: Request) -> Response:
        started = time.perf_counter()
        try:
            if request.method == "POST":
                request.state.form = await read_form(request)
            if request.method == "POST" and not web.csrf.check(
                request.cookies, form(request).get(CSRF_FIELD), request.cookies.get(SESSION_COOKIE)
            ):
                response = web.error(
                    request, 403, "This form has expired or did not come from Fanline. Go back, reload the page and try again."
                )
            else:
                request.state.viewer = await resolve_viewer(request)
                response = await handler(web, request)
        except DomainError as exc:
            response = web.domain_error(request, exc)
        except Exception:
            log.exception("unhandled error on %s %s", request.method, path)
            try:
                response = web.error(request, 500, "Sorry, that did not work. Please try again.")
            except Exception:  # noqa: BLE001 - even the error page failed
                response = Response("internal error", 500, media_type="text/plain")
        finally:
            elapsed = time.perf_counter() - started
            metrics.HTTP_LATENCY.labels(SERVICE, request.method, path).observe(elapsed)
        metrics.HTTP_REQUESTS.labels(SERVICE, request.method, path, str(response.status_code)).inc()
        return response

    return Route(path, endpoint, methods=list(methods))
