"""The OAuth authorization-code flow in a real browser (Debian's Chromium,
Playwright): an app sends its user to ``/oauth/authorize``, they sign in on
the web page, approve, and the app gets the code — shown on the out-of-band
page (``urn:ietf:wg:oauth:2.0:oob``) or sent to its redirect URI — and
exchanges it with its PKCE verifier. On the session's embedded system (the
flow is the gateway's and social-graph's, the same on both backends; the
real-engine side of the code store is in tests/contract)."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, Page, Route, expect

from .client import PASSWORD, Api
from .conftest import ARTIFACTS
from .masto import app, client, with_client
from .test_browser import TIMEOUT_MS, browser, sign_in  # noqa: F401 (the browser fixture)

pytestmark = pytest.mark.e2e
OOB = "urn:ietf:wg:oauth:2.0:oob"
CALLBACK = "http://127.0.0.1:9/callback"  # never reached: the test catches the redirect


@pytest.fixture
def page(browser: Browser, embedded_system: Any) -> Iterator[Page]:  # noqa: F811
    context = browser.new_context(base_url=embedded_system.url(), viewport={"width": 1000, "height": 760})
    context.set_default_timeout(TIMEOUT_MS)
    yield context.new_page()
    context.close()


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


def authorize_url(client_id: str, redirect_uri: str, **extra: str) -> str:
    query = {"client_id": client_id, "redirect_uri": redirect_uri, "response_type": "code", "scope": "read write", **extra}
    return "/oauth/authorize?" + urlencode(query)


def shot(page: Page, name: str) -> None:
    folder = ARTIFACTS / "screenshots" / "mastodon"
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def test_authorization_code_with_pkce_on_the_out_of_band_page(page: Page, embedded_system: Any) -> None:
    url = embedded_system.url()
    plain = Api(url)
    name = plain.sign_up()
    plain.close()
    client_id, secret = app(url, ["read", "write", "follow"], name="Browser Test App")
    verifier, challenge = pkce()

    # Signed out: the page sends the user to sign in, then back.
    page.goto(authorize_url(client_id, OOB, code_challenge=challenge, code_challenge_method="S256"))
    expect(page).to_have_url(re.compile(r"/login\?next="))
    form = page.locator("form[action='/login']")
    form.get_by_label("Username").fill(name)
    form.get_by_label("Password").fill(PASSWORD)
    form.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Authorize Browser Test App")).to_be_visible()
    expect(page.locator("ul.scopes")).to_contain_text("post and delete tweets")
    shot(page, "authorize")
    page.get_by_role("button", name="Authorize").click()
    code = page.locator("#authorization-code").inner_text().strip()
    shot(page, "authorize-code")

    token = exchange(url, (client_id, secret), code, OOB, verifier)
    assert token.status_code == 200, token.text
    body = token.json()
    assert body["scope"] == "read write" and body["token_type"] == "Bearer" and isinstance(body["created_at"], int)
    me = client(url, token=body["access_token"]).account_verify_credentials()
    assert me.username == name

    # A code works once; without the right verifier it does not work at all.
    again = exchange(url, (client_id, secret), code, OOB, verifier)
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
    page.goto(authorize_url(client_id, OOB, code_challenge=challenge, code_challenge_method="S256"))
    page.get_by_role("button", name="Authorize").click()
    second = page.locator("#authorization-code").inner_text().strip()
    wrong = exchange(url, (client_id, secret), second, OOB, pkce()[0])
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"


def test_approve_and_deny_redirect_to_the_registered_uri(page: Page, embedded_system: Any) -> None:
    url = embedded_system.url()
    plain = Api(url)
    name = plain.sign_up()
    plain.close()
    client_id, secret = app_with_callback(url)
    sign_in(page, name)
    landed: list[str] = []

    def catch(route: Route) -> None:
        landed.append(route.request.url)
        route.fulfill(status=200, body="back in the app")

    page.route(f"{CALLBACK}**", catch)
    page.goto(authorize_url(client_id, CALLBACK, state="xyz"))
    page.get_by_role("button", name="Authorize").click()
    expect(page.locator("body")).to_contain_text("back in the app")
    query = parse_qs(urlsplit(landed[-1]).query)
    assert query["state"] == ["xyz"]
    token = exchange(url, (client_id, secret), query["code"][0], CALLBACK, None)
    assert token.status_code == 200, token.text

    page.goto(authorize_url(client_id, CALLBACK, state="abc"))
    page.get_by_role("button", name="Deny").click()
    expect(page.locator("body")).to_contain_text("back in the app")
    assert parse_qs(urlsplit(landed[-1]).query) == {"error": ["access_denied"], "state": ["abc"]}

    # An address the app did not register is never redirected to.
    page.goto(authorize_url(client_id, "https://evil.example/steal"))
    expect(page.locator("main")).to_contain_text("did not register")


def app_with_callback(url: str) -> tuple[str, str]:
    with httpx.Client(base_url=url, timeout=30) as http:
        answer = http.post(
            "/api/v1/apps", json={"client_name": "Callback App", "redirect_uris": [OOB, CALLBACK], "scopes": "read write"}
        ).json()
    assert answer["redirect_uris"] == [OOB, CALLBACK]
    return answer["client_id"], answer["client_secret"]


def exchange(url: str, credentials: tuple[str, str], code: str, redirect_uri: str, verifier: str | None) -> httpx.Response:
    fields = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri}
    if verifier is not None:
        fields["code_verifier"] = verifier
    return httpx.post(f"{url}/oauth/token", data=with_client(credentials, **fields), timeout=30)
