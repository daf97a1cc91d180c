"""The OAuth authorization page (``/oauth/authorize``) and the pages the
Mastodon-compatible API links to (``/@username``, ``/@username/<status id>``).

An app sends its user here with ``client_id``, ``redirect_uri``, ``scope``,
``state`` and, with PKCE, ``code_challenge`` (S256 or plain). Signed out, the
page sends them to the sign-in form and back; signed in, it shows what the
app asks for and two buttons. Approval makes a single-use code (social-graph,
ten minutes) and redirects to the app's registered ``redirect_uri`` with it —
or, for ``urn:ietf:wg:oauth:2.0:oob``, shows it to copy. The form is the web
UI's, with its session and CSRF protection; its ``form-action`` policy also
admits the app's redirect target, or browsers would block the redirect.
"""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute

from fanline_shared import scopes as scope_rules
from fanline_shared.errors import DomainError, NotFound

from .page_kit import SECURITY_HEADERS, Web, form, gw, page, redirect, require_viewer, user_path, viewer

OOB = "urn:ietf:wg:oauth:2.0:oob"
FIELDS = ("client_id", "redirect_uri", "scope", "state", "code_challenge", "code_challenge_method")
SCOPE_TEXT = {
    "read": "read your timelines, your account and whom you follow",
    "write": "post and delete tweets, and follow and unfollow people, as you",
    "follow": "see and change whom you follow",
    "push": "receive push notifications (Fanline sends none)",
    "profile": "see your account's name",
}


def describe(scopes: tuple[str, ...]) -> list[str]:
    return [SCOPE_TEXT.get(s, s.replace(":", ": ")) for s in scopes]


def _target_source(uri: str) -> str:
    """The CSP source that admits a redirect to ``uri``."""
    parts = urlsplit(uri)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme in ("http", "https") else f"{parts.scheme}:"


def _headers(redirect_uri: str) -> dict[str, str]:
    if redirect_uri == OOB:
        return {}
    policy = SECURITY_HEADERS["Content-Security-Policy"].replace(
        "form-action 'self'", f"form-action 'self' {_target_source(redirect_uri)}"
    )
    return {"Content-Security-Policy": policy}


def _back(redirect_uri: str, **params: str) -> Response:
    """Send the browser back to the app (only ever to a registered URI)."""
    separator = "&" if "?" in redirect_uri else "?"
    response = RedirectResponse(f"{redirect_uri}{separator}{urlencode(params)}", status_code=303)
    response.headers.update({**SECURITY_HEADERS, **_headers(redirect_uri)})
    return response


async def _checked(web: Web, request: Request, fields: dict[str, str]) -> tuple[dict, tuple[str, ...]] | Response:  # type: ignore[type-arg]
    """The app and the scopes asked for, or the page (or redirect) saying why not."""
    try:
        app = await gw(request).app(fields.get("client_id", ""))
    except NotFound:
        return web.error(request, 400, "This app is not registered here: the link you followed is broken.")
    redirect_uri = fields.get("redirect_uri", "")
    if redirect_uri not in app["redirect_uris"]:
        return web.error(request, 400, "The app asked to return to an address it did not register. Nothing was authorized.")
    try:
        requested = scope_rules.parse(fields.get("scope") or None, default=" ".join(app["scopes"]))
        if not scope_rules.covers(app["scopes"], requested):
            raise scope_rules.InvalidScope("the app asked for more than it registered for")
    except DomainError:
        if redirect_uri == OOB:
            return web.error(request, 400, "The app asked for permissions it did not register for.")
        return _back(redirect_uri, error="invalid_scope", **({"state": fields["state"]} if fields.get("state") else {}))
    return app, requested


async def show(web: Web, request: Request) -> Response:
    fields = {k: v for k in FIELDS if (v := request.query_params.get(k))}
    checked = await _checked(web, request, fields)
    if isinstance(checked, Response):
        return checked
    app, requested = checked
    if request.query_params.get("response_type", "code") != "code":
        return _back(fields["redirect_uri"], error="unsupported_response_type")
    if viewer(request).username is None:
        return redirect("/login?" + urlencode({"next": f"/oauth/authorize?{request.url.query}"}))
    context = {"title": f"Authorize {app['name']}", "app": app, "scopes": describe(requested), "fields": list(fields.items())}
    return web.render(request, "authorize.html", context, headers=_headers(fields["redirect_uri"]))


async def decide(web: Web, request: Request) -> Response:
    me = require_viewer(request)
    fields = {k: v for k in FIELDS if (v := form(request).get(k))}
    checked = await _checked(web, request, fields)
    if isinstance(checked, Response):
        return checked
    app, _ = checked
    redirect_uri, state = fields["redirect_uri"], fields.get("state")
    extra = {"state": state} if state else {}
    if form(request).get("decision") != "approve":
        if redirect_uri == OOB:
            return web.render(request, "authorize_code.html", {"title": "Access denied", "app": app, "code": None})
        return _back(redirect_uri, error="access_denied", **extra)
    code = await gw(request).authorize(me, fields)
    if redirect_uri == OOB:
        return web.render(request, "authorize_code.html", {"title": "Authorization code", "app": app, "code": code})
    return _back(redirect_uri, code=code, **extra)


async def profile(web: Web, request: Request) -> Response:
    """``/@username``: Mastodon's account URL; the user's page is ``/u/``."""
    return redirect(user_path(request.path_params["username"]))


async def status(web: Web, request: Request) -> Response:
    """``/@username/<status id>``: one tweet (Mastodon's status URL)."""
    tweet = await gw(request).status(request.path_params["sid"])
    if tweet["username"].lower() != request.path_params["username"].lower():
        raise NotFound("no such tweet", code="tweet_not_found")
    return web.render(request, "status.html", {"title": f"{tweet['username']}: a tweet", "tweet": tweet})


def routes(web: Web) -> list[BaseRoute]:
    return [
        page(web, "/oauth/authorize", show),
        page(web, "/oauth/authorize/", show),
        page(web, "/oauth/authorize", decide, ("POST",)),
        page(web, "/@{username}", profile),
        page(web, "/@{username}/{sid}", status),
    ]
