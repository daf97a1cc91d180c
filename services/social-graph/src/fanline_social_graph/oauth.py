"""OAuth 2 for the Mastodon-compatible API: apps, authorization codes, and
the tokens they turn into (RFC 6749, RFC 7636 PKCE, RFC 7009 revocation).

social-graph keeps the apps (client secrets hashed), the codes (hashed,
single use, ``CODE_TTL_S``) and — in the one token store — the tokens; the
gateway serves ``/api/v1/apps``, ``/oauth/token`` and ``/oauth/revoke`` and
the authorization page on top of these calls. The password grant goes
through ``SocialGraph.login`` (the same argon2 path as ``/v1/sessions``),
after the gateway's failed-log-in limits.

Errors carry the RFC 6749 error code as their ``code``: ``invalid_client``
(401), ``invalid_grant``, ``invalid_scope``, ``invalid_request`` (400).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from fanline_shared import scopes as scope_rules
from fanline_shared.domain import canonical, is_valid_username, to_rfc3339, utcnow
from fanline_shared.errors import BadRequest, NotFound, Unauthorized

from .adapters import SocialGraphStorage
from .ports import CodeGrant, OAuthApp
from .service import SocialGraph, token_hash

OOB = "urn:ietf:wg:oauth:2.0:oob"
CODE_TTL_S = 600  # Doorkeeper's default: ten minutes
NAME_MAX = 200
URI_MAX = 2000
MAX_REDIRECT_URIS = 10
_FORBIDDEN_SCHEMES = {"data", "javascript", "vbscript"}
_PKCE = {"S256", "plain"}


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _bad(code: str, message: str) -> BadRequest:
    return BadRequest(message, code=code)


def invalid_client() -> Unauthorized:
    return Unauthorized("client authentication failed: unknown client or wrong secret", code="invalid_client")


def invalid_grant() -> BadRequest:
    return _bad(
        "invalid_grant",
        "the authorization grant is invalid, expired, already used, does not match the redirect URI "
        "or was issued to another client",
    )


def parse_redirect_uris(raw: object) -> tuple[str, ...]:
    """Newline-separated (or a list of) absolute URIs or the OOB marker."""
    if isinstance(raw, list):
        items = [str(v) for v in raw]
    elif isinstance(raw, str):
        items = raw.split()
    else:
        items = []
    uris = tuple(dict.fromkeys(u.strip() for u in items if u.strip()))
    if not uris:
        raise _bad("invalid_redirect_uri", "redirect_uris is required")
    if len(uris) > MAX_REDIRECT_URIS:
        raise _bad("invalid_redirect_uri", f"at most {MAX_REDIRECT_URIS} redirect URIs")
    for uri in uris:
        if uri == OOB:
            continue
        parts = urlsplit(uri)
        if (
            len(uri) > URI_MAX
            or not parts.scheme
            or parts.scheme.lower() in _FORBIDDEN_SCHEMES
            or parts.fragment
            or any(ord(c) < 0x21 for c in uri)
            or (parts.scheme in ("http", "https") and not parts.netloc)
        ):
            raise _bad("invalid_redirect_uri", f"redirect URI {uri[:80]!r} must be absolute, without a fragment")
    return uris


@dataclass(frozen=True)
class ClientCredentials:
    client_id: str
    client_secret: str


class OAuth:
    """The OAuth use cases over social-graph's storage and token store."""

    def __init__(self, storage: SocialGraphStorage, graph: SocialGraph) -> None:
        self._storage = storage
        self._graph = graph

    # --- apps -------------------------------------------------------------------------

    async def register_app(self, name: object, redirect_uris: object, scopes: object, website: object) -> dict[str, Any]:
        """A new app, with its secret (shown this once)."""
        if not isinstance(name, str) or not name.strip() or len(name) > NAME_MAX:
            raise _bad("invalid_request", f"client_name must be 1-{NAME_MAX} characters")
        site = website.strip() if isinstance(website, str) and website.strip() else None
        if site is not None and (len(site) > URI_MAX or urlsplit(site).scheme not in ("http", "https")):
            raise _bad("invalid_request", "website must be an http(s) URL")
        secret = secrets.token_urlsafe(32)
        app = OAuthApp(
            client_id=secrets.token_urlsafe(32),
            secret_hash=_hash(secret),
            name=name.strip(),
            website=site,
            redirect_uris=parse_redirect_uris(redirect_uris),
            scopes=scope_rules.parse(scopes if isinstance(scopes, str | list) else None),
            created_at=utcnow(),
        )
        await self._storage.oauth.create_app(app)
        return {**app_json(app), "client_secret": secret}

    async def app(self, client_id: str) -> OAuthApp:
        app = await self._storage.oauth.get_app(client_id) if client_id and len(client_id) <= 200 else None
        if app is None:
            raise NotFound("no such app", code="app_not_found")
        return app

    async def verify_client(self, client: ClientCredentials) -> OAuthApp:
        app = await self._storage.oauth.get_app(client.client_id) if 0 < len(client.client_id) <= 200 else None
        if app is None or not hmac.compare_digest(app.secret_hash, _hash(client.client_secret)):
            raise invalid_client()
        return app

    # --- authorization codes -----------------------------------------------------------

    async def authorize(
        self,
        client_id: str,
        username: str,
        redirect_uri: str,
        scopes: object,
        challenge: str | None,
        challenge_method: str | None,
    ) -> str:
        """A code for ``username``'s approval of the app (checked: its redirect
        URI, scopes within the app's, a well-formed PKCE challenge)."""
        app = await self.app(client_id)
        requested = self.allowed_scopes(app, scopes)
        if redirect_uri not in app.redirect_uris:
            raise _bad("invalid_redirect_uri", "the redirect URI is not one the app registered")
        if challenge is not None:
            method = challenge_method or "plain"
            if method not in _PKCE or not 43 <= len(challenge) <= 128:
                raise _bad("invalid_request", "code_challenge must be 43-128 characters, method S256 or plain")
            challenge_method = method
        user = await self._storage.users.get(username) if is_valid_username(username) else None
        if user is None:
            raise NotFound("no such user", code="user_not_found")
        code = secrets.token_urlsafe(32)
        grant = CodeGrant(app.client_id, user.username, redirect_uri, requested, challenge, challenge_method)
        await self._storage.oauth.create_code(_hash(code), grant, CODE_TTL_S)
        return code

    @staticmethod
    def allowed_scopes(app: OAuthApp, raw: object) -> tuple[str, ...]:
        requested = scope_rules.parse(raw if isinstance(raw, str | list) else None, default=" ".join(app.scopes))
        if not scope_rules.covers(app.scopes, requested):
            raise scope_rules.InvalidScope("the requested scope is not one the app registered for")
        return requested

    # --- tokens -------------------------------------------------------------------------

    async def exchange_code(
        self, client: ClientCredentials, code: str, redirect_uri: str, verifier: str | None
    ) -> dict[str, Any]:
        app = await self.verify_client(client)
        grant = await self._storage.oauth.take_code(_hash(code)) if code and len(code) <= 200 else None
        if grant is None or grant.client_id != app.client_id or grant.redirect_uri != redirect_uri:
            raise invalid_grant()
        if grant.challenge is not None and not _pkce_ok(grant, verifier):
            raise invalid_grant()
        return await self._token(grant.username, grant.scopes, app.client_id)

    async def client_token(self, client: ClientCredentials, scopes: object) -> dict[str, Any]:
        """An app's own token (client credentials): registers accounts and
        reads public data, nothing that needs a user."""
        app = await self.verify_client(client)
        return await self._token(None, self.allowed_scopes(app, scopes), app.client_id)

    async def password_token(
        self, client: ClientCredentials, username: object, password: object, scopes: object
    ) -> dict[str, Any]:
        app = await self.verify_client(client)
        granted = self.allowed_scopes(app, scopes)
        session = await self._graph.login(username, password, scopes=scope_rules.text(granted), client_id=app.client_id)
        return _token_json(session["token"], granted)

    async def user_token(self, client_id: str, username: str, scopes: object) -> dict[str, Any]:
        """A token for a user the app just registered (``POST /api/v1/accounts``)."""
        app = await self.app(client_id)
        return await self._token(username, self.allowed_scopes(app, scopes), app.client_id)

    async def _token(self, username: str | None, granted: tuple[str, ...], client_id: str) -> dict[str, Any]:
        token, _ = await self._graph.issue(username, scopes=scope_rules.text(granted), client_id=client_id)
        if username is not None:
            await self._graph.activity.seen(canonical(username))
        return _token_json(token, granted)

    async def revoke(self, client: ClientCredentials, token: str) -> None:
        """RFC 7009: revoke a token issued to this client; anything else
        (unknown, another client's) is ignored, with the same answer."""
        app = await self.verify_client(client)
        if not token or len(token) > 200:
            return
        session = await self._storage.sessions.get(token_hash(token))
        if session is not None and session.client_id == app.client_id:
            await self._storage.sessions.revoke(token_hash(token))


def _pkce_ok(grant: CodeGrant, verifier: str | None) -> bool:
    if verifier is None or not 43 <= len(verifier) <= 128 or grant.challenge is None:
        return False
    if grant.challenge_method == "S256":
        digest = hashlib.sha256(verifier.encode("ascii", "replace")).digest()
        expected = base64.urlsafe_b64encode(digest).decode().rstrip("=")
    else:
        expected = verifier
    return hmac.compare_digest(expected, grant.challenge)


def _token_json(token: str, granted: tuple[str, ...]) -> dict[str, Any]:
    return {
        "access_token": token,
        "token_type": "Bearer",
        "scope": scope_rules.text(granted),
        "created_at": int(utcnow().timestamp()),
    }


def app_json(app: OAuthApp) -> dict[str, Any]:
    """An app as ``/api/v1/apps`` shows it (without its secret)."""
    return {
        "client_id": app.client_id,
        "name": app.name,
        "website": app.website,
        "scopes": list(app.scopes),
        "redirect_uris": list(app.redirect_uris),
        "redirect_uri": "\n".join(app.redirect_uris),
        "created_at": to_rfc3339(app.created_at),
    }
