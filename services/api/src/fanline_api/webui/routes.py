"""The Twissandra web pages, server-rendered on top of the gateway's use cases.

Every page calls ``Gateway`` (``request.app.state.gateway``) exactly as the
JSON API does — never HTTP to itself, never another service's tables — so the
pages get the same validation and the same error messages. Domain errors
become friendly HTML pages with the status the API would use; nothing here
answers 500 for anything a client can send.

Forms are POST/redirect/GET, protected by a signed double-submit CSRF token
(see ``security.py``). Pages work without JavaScript; ``static/fanline.js``
only adds the 280-character counter.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from starlette.datastructures import FormData
from starlette.formparsers import FormParser, MultiPartException, MultiPartParser
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from fanline_shared import metrics
from fanline_shared.domain import (
    BODY_MAX,
    LIMIT_DEFAULT,
    canonical,
    parse_rfc3339,
    validate_limit,
    validate_password,
    validate_username,
)
from fanline_shared.errors import (
    BadRequest,
    Conflict,
    DomainError,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    status_of,
)
from fanline_shared.http_routes import MAX_BODY_BYTES

from ..config import Settings
from ..gateway import Gateway
from .security import CSRF_COOKIE, CSRF_FIELD, SESSION_COOKIE, Csrf, clear_cookie, set_cookie

SERVICE = "api"
HERE = Path(__file__).resolve().parent
MAX_FORM_FIELDS = 20
FIND_LIMIT = 20
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


# --- timelines ---------------------------------------------------------------------


async def home(web: Web, request: Request) -> Response:
    me = viewer(request).username
    if me is None:
        return await public(web, request, welcome=True)
    return await home_page(web, request, me)


async def home_page(
    web: Web, request: Request, me: str, *, error: str | None = None, draft: str = "", status: int = 200
) -> Response:
    limit, cursor = paging(request) if request.method == "GET" else (LIMIT_DEFAULT, None)
    page_, regenerating = await asyncio.gather(
        gw(request).timeline("home", me, limit, cursor), gw(request).regenerating(me, viewer(request).returned_at)
    )
    items: list[dict[str, Any]] = page_["items"]
    # Right after posting, the author's own home row is still being written by
    # the fan-out worker: show the new tweet at once anyway.
    posted = request.query_params.get("posted") if request.method == "GET" else None
    if posted and cursor is None and all(t["id"] != posted for t in items):
        try:
            tweet = await gw(request).tweet(posted)
        except NotFound:
            tweet = None
        newest = items[0]["created_at"] if items else ""
        if tweet and canonical(tweet["username"]) == canonical(me) and tweet["created_at"] > newest:
            items = [tweet, *items]
    return web.render(
        request,
        "timeline.html",
        {
            "title": "Home",
            "kind": "home",
            "tweets": items,
            "cursor": cursor,
            "more": more_url("/", limit, page_["next_cursor"]),
            "newest": "/" if cursor else None,
            "error": error,
            "draft": draft,
            "idempotency_key": uuid.uuid4().hex,
            "regenerating": regenerating,
        },
        status,
    )


async def public(web: Web, request: Request, *, welcome: bool = False) -> Response:
    limit, cursor = paging(request)
    page_ = await gw(request).timeline("public", None, limit, cursor)
    # "More" always continues on /public: the cursor belongs to the public line,
    # whoever is signed in when the link is followed.
    return web.render(
        request,
        "timeline.html",
        {
            "title": "Public timeline",
            "kind": "public",
            "welcome": welcome,
            "tweets": page_["items"],
            "cursor": cursor,
            "more": more_url("/public", limit, page_["next_cursor"]),
            "newest": "/public" if cursor else None,
        },
    )


async def public_page(web: Web, request: Request) -> Response:
    return await public(web, request)


# --- tweets --------------------------------------------------------------------------


async def post_tweet(web: Web, request: Request) -> Response:
    me = require_viewer(request)
    fields = form(request)
    body = fields.get("body", "")
    try:
        tweet, _ = await gw(request).post(me, {"body": body}, fields.get("idempotency_key") or None)
    except InvalidInput as exc:
        return await home_page(web, request, me, error=exc.message, draft=body, status=422)
    return redirect("/?" + urlencode({"posted": tweet["id"]}))


async def delete_tweet(web: Web, request: Request) -> Response:
    me = require_viewer(request)
    try:
        await gw(request).delete(me, request.path_params["tweet_id"])
    except NotFound:
        pass  # already gone (a second click): the user's wish holds
    return redirect(safe_next(form(request).get("next")))


# --- sign in, sign up, sign out --------------------------------------------------------


def login_form(
    web: Web,
    request: Request,
    *,
    status: int = 200,
    signin_error: str | None = None,
    signup_error: str | None = None,
    signin_username: str = "",
    signup_username: str = "",
) -> Response:
    nxt = safe_next(form(request).get("next") or request.query_params.get("next"), "")
    return web.render(
        request,
        "login.html",
        {
            "title": "Sign in or sign up",
            "next": nxt,
            "signin_error": signin_error,
            "signup_error": signup_error,
            "signin_username": signin_username,
            "signup_username": signup_username,
        },
        status,
    )


def signed_in(web: Web, request: Request, session: dict[str, Any]) -> Response:
    response = redirect(safe_next(form(request).get("next")))
    try:
        expires = parse_rfc3339(str(session["expires_at"]))
        max_age: int | None = max(0, int((expires - datetime.now(UTC)).total_seconds()))
    except (KeyError, ValueError):
        max_age = None
    token = str(session["token"])
    set_cookie(request, response, SESSION_COOKIE, token, max_age)
    set_cookie(request, response, CSRF_COOKIE, web.csrf.mint(token))
    return response


async def login_page(web: Web, request: Request) -> Response:
    if viewer(request).username is not None:
        return redirect(safe_next(request.query_params.get("next")))
    return login_form(web, request)


async def sign_in(web: Web, request: Request) -> Response:
    fields = form(request)
    username = fields.get("username", "").strip()
    try:
        session = await gw(request).login({"username": username, "password": fields.get("password", "")}, client_address(request))
    except Unauthorized as exc:
        return login_form(web, request, status=401, signin_error=exc.message, signin_username=username)
    return signed_in(web, request, session)


async def sign_up(web: Web, request: Request) -> Response:
    fields = form(request)
    username = fields.get("username", "").strip()
    password = fields.get("password", "")
    try:
        validate_username(username)
        validate_password(password)
        if password != fields.get("password2", ""):
            raise InvalidInput("the two passwords do not match", code="password_mismatch")
        await gw(request).sign_up({"username": username, "password": password})
    except (InvalidInput, Conflict) as exc:
        return login_form(web, request, status=status_of(exc), signup_error=exc.message, signup_username=username)
    session = await gw(request).login({"username": username, "password": password}, client_address(request))
    return signed_in(web, request, session)


async def sign_out(web: Web, request: Request) -> Response:
    token = request.cookies.get(SESSION_COOKIE)
    if token:
        try:
            await gw(request).logout(f"Bearer {token}")
        except Unauthorized:
            pass  # already expired or revoked
    response = redirect("/")
    clear_cookie(request, response, SESSION_COOKIE)
    clear_cookie(request, response, CSRF_COOKIE)
    return response


# --- people ------------------------------------------------------------------------------


async def follow_state(request: Request, username: str) -> bool | None:
    """None when there is no button to show (signed out, or one's own page)."""
    me = viewer(request).username
    if me is None or canonical(me) == canonical(username):
        return None
    return await gw(request).is_following(me, username)


async def find(web: Web, request: Request) -> Response:
    query = request.query_params.get("q", "").strip()
    exact: dict[str, Any] | None = None
    matches: list[dict[str, Any]] = []
    error = None
    following = None
    if query:
        try:
            validate_username(query)
        except InvalidInput as exc:
            error = exc.message
        else:
            found = await gw(request).users(query)
            exact = found[0] if found else None
            matches = [u for u in await gw(request).search(query, FIND_LIMIT) if canonical(u["username"]) != canonical(query)]
            if exact is not None:
                following = await follow_state(request, exact["username"])
    return web.render(
        request,
        "find.html",
        {
            "title": "Find friends",
            "query": query,
            "exact": exact,
            "matches": matches,
            "error": error,
            "following": following,
        },
        422 if error else 200,
    )


async def user_page(web: Web, request: Request) -> Response:
    name = request.path_params["username"]
    limit, cursor = paging(request)
    profile = await gw(request).user(name)  # 404 first
    page_ = await gw(request).timeline("user", name, limit, cursor)
    path = user_path(profile["username"])
    return web.render(
        request,
        "user.html",
        {
            "title": profile["username"],
            "profile": profile,
            "tab": "tweets",
            "tweets": page_["items"],
            "following": await follow_state(request, name),
            "cursor": cursor,
            "more": more_url(request.url.path, limit, page_["next_cursor"]),
            "newest": path if cursor else None,
        },
    )


def edges_page(direction: str) -> PageHandler:
    async def handler(web: Web, request: Request) -> Response:
        name = request.path_params["username"]
        limit, cursor = paging(request)
        profile = await gw(request).user(name)
        page_ = await gw(request).edges(name, direction, limit, cursor)
        path = f"{user_path(profile['username'])}/{direction}"
        return web.render(
            request,
            "user.html",
            {
                "title": f"{profile['username']} · {direction}",
                "profile": profile,
                "tab": direction,
                "edges": page_["items"],
                "following": await follow_state(request, name),
                "cursor": cursor,
                "more": more_url(request.url.path, limit, page_["next_cursor"]),
                "newest": path if cursor else None,
            },
        )

    return handler


def change_follow(follow: bool) -> PageHandler:
    async def handler(web: Web, request: Request) -> Response:
        me = require_viewer(request)
        target = request.path_params["username"]
        await gw(request).follow(me, me, target, follow=follow)
        return redirect(safe_next(form(request).get("next"), user_path(target)))

    return handler


# --- the routes ------------------------------------------------------------------------------


def routes(settings: Settings) -> list[BaseRoute]:
    """The web pages and their static files, to add to the gateway's routes."""
    web = Web(settings)
    return [
        page(web, "/", home),
        page(web, "/public", public_page),
        page(web, "/login", login_page),
        page(web, "/login", sign_in, ("POST",)),
        page(web, "/signup", sign_up, ("POST",)),
        page(web, "/logout", sign_out, ("POST",)),
        page(web, "/find", find),
        page(web, "/tweets", post_tweet, ("POST",)),
        page(web, "/tweets/{tweet_id}/delete", delete_tweet, ("POST",)),
        page(web, "/u/{username}", user_page),
        page(web, "/u/{username}/followers", edges_page("followers")),
        page(web, "/u/{username}/following", edges_page("following")),
        page(web, "/u/{username}/follow", change_follow(True), ("POST",)),
        page(web, "/u/{username}/unfollow", change_follow(False), ("POST",)),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
