"""The web pages' pieces that need no peers: CSRF tokens, cookies, redirects,
the login page's markup, rejected forms and the static files. Everything that
touches a peer is tested in a real browser (tests/e2e/test_browser.py)."""

from __future__ import annotations

import re
import warnings

import pytest

from fanline_api.app import create_app
from fanline_api.config import Settings
from fanline_api.webui.page_kit import safe_next, when
from fanline_api.webui.security import CSRF_COOKIE, Csrf

with warnings.catch_warnings():  # Starlette suggests httpx2 over httpx; either works here
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


@pytest.fixture
def client() -> TestClient:
    # No lifespan: nothing connects; pages that need no peer still work.
    return TestClient(create_app(Settings.from_env({"FANLINE_CURSOR_SECRET": "unit-test"})), follow_redirects=False)


def test_csrf_tokens_are_bound_to_the_session_and_signed() -> None:
    csrf = Csrf(b"secret")
    token = csrf.mint("session-a")
    assert csrf.valid(token, "session-a")
    assert not csrf.valid(token, "session-b")
    assert not csrf.valid(token, None)
    nonce, _, signature = token.partition(".")
    assert not csrf.valid(f"{nonce}x.{signature}", "session-a")
    assert not csrf.valid("", "session-a") and not csrf.valid("x" * 500, "session-a")
    assert not Csrf(b"other secret").valid(token, "session-a")
    cookies = {CSRF_COOKIE: token}
    assert csrf.check(cookies, token, "session-a")
    assert not csrf.check(cookies, csrf.mint("session-a"), "session-a")  # field must equal the cookie
    assert not csrf.check({}, token, "session-a")
    assert not csrf.check(cookies, None, "session-a")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("/u/ann?cursor=abc", "/u/ann?cursor=abc"),
        ("/", "/"),
        (None, "/"),
        ("", "/"),
        ("https://evil.example/", "/"),
        ("//evil.example/", "/"),
        ("/\\evil.example", "/"),
        ("javascript:alert(1)", "/"),
        ("/a\r\nSet-Cookie: x=1", "/"),
    ],
)
def test_next_is_always_a_local_path(raw: str | None, expected: str) -> None:
    assert safe_next(raw) == expected


def test_times_are_shown_in_utc() -> None:
    assert when("2026-11-22T10:15:30.123456Z") == "22 Nov 2026, 10:15 UTC"
    assert when("not a time") == "not a time"


def test_login_page_labels_every_control_and_sets_a_csrf_cookie(client: TestClient) -> None:
    response = client.get("/login")
    assert response.status_code == 200
    html = response.text
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in html
    controls = re.findall(r"<(?:input|textarea)\b[^>]*>", html)
    visible = [c for c in controls if 'type="hidden"' not in c]
    assert len(visible) == 5  # sign in: 2, sign up: 3
    for control in visible:
        ident = re.search(r'id="([^"]+)"', control)
        assert ident is not None and f'<label for="{ident.group(1)}">' in html, control
    token = re.search(r'name="csrf" value="([^"]+)"', html)
    assert token is not None and response.cookies[CSRF_COOKIE] == token.group(1)
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie and "path=/" in cookie and "secure" not in cookie
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["cache-control"] == "no-store"


def test_cookies_are_secure_behind_an_https_proxy(client: TestClient) -> None:
    response = client.get("/login", headers={"X-Forwarded-Proto": "https"})
    assert "secure" in response.headers["set-cookie"].lower()


def test_posts_without_a_valid_csrf_token_get_a_friendly_403(client: TestClient) -> None:
    for kwargs in (
        {"data": {"username": "ann", "password": "x" * 10}},
        {"content": b""},
        {"data": {"csrf": "forged.token"}},
        {"json": {"csrf": "x"}},
    ):
        response = client.post("/login", **kwargs)  # type: ignore[arg-type]
        assert response.status_code == 403
        assert response.headers["content-type"].startswith("text/html")
        assert "Not allowed" in response.text
    client.get("/login")
    token = client.cookies[CSRF_COOKIE]
    response = client.post("/logout", data={"csrf": token + "x"})
    assert response.status_code == 403


def test_a_signed_out_logout_with_the_token_redirects_home(client: TestClient) -> None:
    token = client.get("/login").cookies[CSRF_COOKIE]
    response = client.post("/logout", data={"csrf": token})
    assert response.status_code == 303 and response.headers["location"] == "/"


def test_oversized_forms_are_refused_with_a_page(client: TestClient) -> None:
    response = client.post("/login", data={"username": "x" * 70_000})
    assert response.status_code == 413 and "Too large" in response.text


def test_static_files(client: TestClient) -> None:
    css = client.get("/static/fanline.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    js = client.get("/static/fanline.js")
    assert js.status_code == 200 and "textarea[data-max]" in js.text
