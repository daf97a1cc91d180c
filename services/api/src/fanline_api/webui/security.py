"""Cookies and CSRF protection of the web pages.

The session cookie holds the API token returned by the sign-in use case
(``HttpOnly``, ``SameSite=Lax``, ``Path=/``, ``Secure`` over HTTPS).

CSRF uses the signed double-submit pattern: the CSRF cookie holds
``nonce.signature`` where the signature is an HMAC of the nonce *and* of the
current session cookie, and every form carries the same value in a hidden
field. A POST passes only if the field equals the cookie and the signature
verifies for the session the request carries, compared in constant time. A
site that cannot read our cookies cannot produce the field, and a token minted
for another session (or for no session) does not verify.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import Response

SESSION_COOKIE = "fanline_session"
CSRF_COOKIE = "fanline_csrf"
CSRF_FIELD = "csrf"
_MAX_TOKEN = 200


def is_https(request: Request) -> bool:
    """HTTPS directly, or behind a proxy that says so (X-Forwarded-Proto)."""
    if request.url.scheme == "https":
        return True
    forwarded = request.headers.get("x-forwarded-proto", "")
    return forwarded.split(",")[0].strip().lower() == "https"


def set_cookie(request: Request, response: Response, name: str, value: str, max_age: int | None = None) -> None:
    response.set_cookie(name, value, max_age=max_age, path="/", secure=is_https(request), httponly=True, samesite="lax")


def clear_cookie(request: Request, response: Response, name: str) -> None:
    response.delete_cookie(name, path="/", secure=is_https(request), httponly=True, samesite="lax")


class Csrf:
    """Mints and checks CSRF tokens bound to the session cookie."""

    def __init__(self, secret: bytes) -> None:
        # A key of its own, derived from the gateway secret (domain separation).
        self._key = hmac.new(secret, b"fanline webui csrf v1", hashlib.sha256).digest()

    def _signature(self, nonce: str, session: str | None) -> str:
        binding = hashlib.sha256((session or "").encode()).hexdigest()
        return hmac.new(self._key, f"{nonce}\x1f{binding}".encode(), hashlib.sha256).hexdigest()

    def mint(self, session: str | None) -> str:
        nonce = secrets.token_urlsafe(18)
        return f"{nonce}.{self._signature(nonce, session)}"

    def valid(self, token: str | None, session: str | None) -> bool:
        if not token or len(token) > _MAX_TOKEN or not token.isascii():
            return False
        nonce, _, signature = token.partition(".")
        return bool(nonce) and hmac.compare_digest(signature, self._signature(nonce, session))

    def check(self, cookies: Mapping[str, str], submitted: str | None, session: str | None) -> bool:
        """The double-submit check of one POST."""
        cookie = cookies.get(CSRF_COOKIE)
        if not cookie or not submitted or len(submitted) > _MAX_TOKEN or not submitted.isascii():
            return False
        return hmac.compare_digest(submitted, cookie) and self.valid(cookie, session)
