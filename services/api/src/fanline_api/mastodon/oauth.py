"""OAuth 2 at the edge: ``POST /api/v1/apps``, ``POST /oauth/token``,
``POST /oauth/revoke``, ``GET /api/v1/apps/verify_credentials`` and the
authorization server metadata (RFC 8414). The authorization page itself is
a web page (``webui/authorize.py``).

Tokens come from the one token store social-graph keeps: a token from
``/oauth/token`` works on ``/v1`` and a ``/v1/sessions`` token here. No
refresh tokens are issued (tokens last until revoked, like Mastodon's), so
the ``refresh_token`` grant is not offered. Client credentials are read from
the body or HTTP Basic (RFC 6749 2.3.1).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import Response

from fanline_shared import scopes as scope_rules
from fanline_shared.errors import BadRequest, NotFound
from fanline_shared.http_routes import json_response

from ..gateway_accounts import GRANT_TYPES
from . import entities
from .context import anyone, base, gw
from .params import Params, read_params

PKCE_METHODS = ["S256", "plain"]


def app_id(client_id: str) -> str:
    """A numeric id for an app (Mastodon's are numbers; ours are keyed by client_id)."""
    return str(int.from_bytes(hashlib.sha256(client_id.encode()).digest()[:6], "big"))


def app_entity(app: dict[str, Any], secret: str | None = None) -> dict[str, Any]:
    return {**entities.application(app, secret=secret), "id": app_id(str(app["client_id"]))}


async def create_app(request: Request) -> Response:
    params = await read_params(request)
    uris = params.list("redirect_uris") if len(params.list("redirect_uris")) > 1 else params.text("redirect_uris")
    scopes = params.text("scopes") if isinstance(params.get("scopes"), str) else params.list("scopes")
    app = await gw(request).register_app(params.text("client_name"), uris, scopes or None, params.text("website"))
    return json_response(app_entity(app, secret=str(app["client_secret"])))


async def verify_app(request: Request) -> Response:
    who = await anyone(request)
    if who.client_id is None:
        raise NotFound("this token was not issued to an app", code="app_not_found")
    return json_response(app_entity(await gw(request).app(who.client_id)))


def client_credentials(request: Request, params: Params) -> dict[str, Any]:
    """``client_id``/``client_secret`` from HTTP Basic, else from the body."""
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "basic" and encoded:
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise BadRequest("malformed Basic credentials", code="invalid_client") from None
        client_id, _, secret = decoded.partition(":")
        return {"client_id": unquote(client_id), "client_secret": unquote(secret)}
    return {"client_id": params.text("client_id") or "", "client_secret": params.text("client_secret") or ""}


async def token(request: Request) -> Response:
    params = await read_params(request)
    fields: dict[str, Any] = {
        **client_credentials(request, params),
        "grant_type": params.text("grant_type"),
        "scope": params.text("scope") or (" ".join(params.list("scope")) or None),
    }
    for name in ("code", "redirect_uri", "code_verifier", "username", "password"):
        fields[name] = params.text(name)
    address = str(getattr(request.state, "client_address", None) or "unknown")
    answer = await gw(request).token(fields, address)
    return json_response(answer, headers={"Cache-Control": "no-store", "Pragma": "no-cache"})


async def revoke(request: Request) -> Response:
    params = await read_params(request)
    await gw(request).revoke({**client_credentials(request, params), "token": params.text("token") or ""})
    return json_response({})


async def metadata(request: Request) -> Response:
    """RFC 8414: every grant served (the password grant included, or
    Mastodon.py refuses to log in with a password), the endpoints, scopes and
    PKCE methods."""
    url = base(request)
    return json_response(
        {
            "issuer": f"{url}/",
            "service_documentation": "https://docs.joinmastodon.org/",
            "authorization_endpoint": f"{url}/oauth/authorize",
            "token_endpoint": f"{url}/oauth/token",
            "app_registration_endpoint": f"{url}/api/v1/apps",
            "revocation_endpoint": f"{url}/oauth/revoke",
            "scopes_supported": sorted(scope_rules.KNOWN),
            "response_types_supported": ["code"],
            "response_modes_supported": ["query", "fragment", "form_post"],
            "code_challenge_methods_supported": PKCE_METHODS,
            "grant_types_supported": list(GRANT_TYPES),
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        }
    )
