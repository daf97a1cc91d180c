"""The web pages in a real browser: Debian's headless Chromium driven by
Playwright, against the whole system on both backends (``system`` fixture).

Playwright never downloads a browser here: it launches /usr/bin/chromium
(``make browser`` installs it). Every page visited is saved as a screenshot
under ``test-artifacts/screenshots/<backend>/<page>.png``.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Dialog, Page, Response, expect, sync_playwright

from .client import PASSWORD, Api, eventually
from .conftest import ARTIFACTS

CHROMIUM = Path("/usr/bin/chromium")
# A closed network: no background traffic, no QUIC, no sandbox (containers).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1000, "height": 760}
PHONE = {"width": 375, "height": 740}
TIMEOUT_MS = 20_000
FANOUT_TIMEOUT_S = 30.0

expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make browser` (Debian's chromium package)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


class Web:
    """Browser contexts on one system, and the screenshots of one backend."""

    def __init__(self, browser: Browser, base_url: str, backend: str) -> None:
        self.browser = browser
        self.base_url = base_url
        self.shots = ARTIFACTS / "screenshots" / backend
        self.shots.mkdir(parents=True, exist_ok=True)
        self.contexts: list[BrowserContext] = []

    def context(self, **options: Any) -> BrowserContext:
        options.setdefault("viewport", DESKTOP)
        context = self.browser.new_context(base_url=self.base_url, **options)
        context.set_default_timeout(TIMEOUT_MS)
        self.contexts.append(context)
        return context

    def page(self, **options: Any) -> Page:
        return self.context(**options).new_page()

    def shot(self, page: Page, name: str) -> None:
        page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)

    def close(self) -> None:
        for context in self.contexts:
            context.close()


@pytest.fixture
def web(browser: Browser, system: Any, request: pytest.FixtureRequest) -> Iterator[Web]:
    backend = request.node.callspec.params["system"]
    helper = Web(browser, system.url(), backend)
    yield helper
    helper.close()


# --- helpers ------------------------------------------------------------------------------


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def submit(page: Page, click: Callable[[], None]) -> Response:
    """Click a form's button; return the response to the POST itself."""
    with page.expect_response(lambda r: r.request.method == "POST") as info:
        click()
    page.wait_for_load_state()
    return info.value


def sign_up(page: Page, username: str, password: str = PASSWORD, again: str | None = None) -> Response:
    page.goto("/login")
    form = page.locator("form[action='/signup']")
    form.get_by_label("Username").fill(username)
    form.get_by_label("Password", exact=True).fill(password)
    form.get_by_label("Password, again").fill(password if again is None else again)
    return submit(page, form.get_by_role("button", name="Sign up").click)


def sign_in(page: Page, username: str, password: str = PASSWORD) -> Response:
    page.goto("/login")
    form = page.locator("form[action='/login']")
    form.get_by_label("Username").fill(username)
    form.get_by_label("Password").fill(password)
    return submit(page, form.get_by_role("button", name="Sign in").click)


def post(page: Page, body: str) -> Response:
    page.goto("/")
    page.get_by_label("What's happening?").fill(body)
    return submit(page, page.get_by_role("button", name="Post Tweet").click)


def tweet_ids(page: Page) -> list[str]:
    return [str(i).removeprefix("t-") for i in page.locator("li.tweet").evaluate_all("els => els.map(e => e.id)")]


def reload_until(page: Page, url: str, check: Callable[[], bool], what: str) -> None:
    """Timelines are eventually consistent: reload until ``check()`` holds."""
    deadline = time.monotonic() + FANOUT_TIMEOUT_S
    while True:
        page.goto(url)
        if check():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {FANOUT_TIMEOUT_S}s: {what}")
        time.sleep(0.3)


def unlabelled_controls(page: Page) -> list[str]:
    """Form controls without a <label> (hidden inputs need none)."""
    return list(
        page.evaluate("""() => [...document.querySelectorAll('input, textarea, select')]
        .filter(el => el.type !== 'hidden' && el.labels.length === 0).map(el => el.outerHTML)""")
    )


def no_horizontal_scroll(page: Page) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


# --- the walk ---------------------------------------------------------------------------------


def test_sign_up_follow_post_paginate_unfollow_delete_sign_out(web: Web, api: Api) -> None:
    a, b = unique("ann"), unique("bob")
    ann_context = web.context()
    ann, bob = ann_context.new_page(), web.page()

    # Sign up two users (each lands on their Home, signed in).
    ann.goto("/login")
    assert unlabelled_controls(ann) == []
    web.shot(ann, "login")
    assert sign_up(ann, a).status == 303
    expect(ann).to_have_url(re.compile(r"/$"))
    expect(ann.get_by_role("heading", name="Home")).to_be_visible()
    expect(ann.get_by_role("navigation", name="Main")).to_contain_text(a)
    assert sign_up(bob, b).status == 303
    web.shot(bob, "home-empty")

    cookies = {c["name"]: c for c in ann_context.cookies()}
    session = cookies["fanline_session"]
    assert session["httpOnly"] and session["sameSite"] == "Lax" and session["path"] == "/"
    assert not session["secure"]  # plain HTTP here; see test_session_cookie_is_secure_over_https
    assert cookies["fanline_csrf"]["httpOnly"]

    # Bob follows Ann with the button on her page; it turns into Unfollow.
    bob.goto(f"/u/{a}")
    expect(bob.get_by_role("heading", name=a)).to_be_visible()
    submit(bob, bob.get_by_role("button", name="Follow", exact=True).click)
    expect(bob.get_by_role("button", name="Unfollow")).to_be_visible()
    expect(bob.locator(".tabs")).to_contain_text("1 follower")

    # Ann posts from the Post Tweet box; the counter counts down as she types.
    ann.goto("/")
    assert unlabelled_controls(ann) == []
    box = ann.get_by_label("What's happening?")
    box.fill("hello")
    expect(ann.locator("#body-counter")).to_have_text("275 characters left")
    text = f"hello from the browser {uuid.uuid4().hex[:6]}"
    box.fill(text)
    assert submit(ann, ann.get_by_role("button", name="Post Tweet").click).status == 303
    first = ann.locator("li.tweet").first
    expect(first).to_contain_text(text)  # her own tweet shows at once
    expect(first.locator(".who")).to_have_text(a)
    tweet_id = tweet_ids(ann)[0]
    web.shot(ann, "home")

    # Bob sees it on his Home once the fan-out worker has delivered it.
    reload_until(bob, "/", lambda: bob.locator("li.tweet", has_text=text).count() == 1, "tweet on Bob's home")
    web.shot(bob, "home-follower")
    bob.goto(f"/u/{a}")
    expect(bob.get_by_role("button", name="Unfollow")).to_be_visible()
    web.shot(bob, "user")

    # More than one page: 21 more tweets (through the API), then "More".
    token = api.login(a)
    for i in range(21):
        newest = api.post(token, f"tweet number {i:02d} from {a}")
    reload_until(
        bob,
        "/",
        lambda: bool(tweet_ids(bob)) and tweet_ids(bob)[0] == newest["id"] and bob.locator("a.more").count() == 1,
        "all 22 tweets on Bob's home",
    )
    page_one = tweet_ids(bob)
    assert len(page_one) == 20
    bob.get_by_role("link", name="More").click()
    expect(bob).to_have_url(re.compile(r"\?cursor="))
    page_two = tweet_ids(bob)
    assert len(page_two) == 2 and page_two[-1] == tweet_id  # newest first: her first tweet is last
    assert not set(page_one) & set(page_two)
    assert bob.locator("a.more").count() == 0  # the last page
    web.shot(bob, "home-page-2")
    bob.get_by_role("link", name="Newest").click()
    assert tweet_ids(bob) == page_one

    # The public timeline, Ann's page and her followers, Find friends.
    bob.goto("/public?limit=8")
    expect(bob.get_by_role("heading", name="Public timeline")).to_be_visible()
    expect(bob.locator("li.tweet")).to_have_count(8)
    web.shot(bob, "public")
    bob.goto(f"/u/{a}")
    expect(bob.locator(".tabs")).to_contain_text("22 tweets")
    bob.get_by_role("link", name="1 follower").click()
    expect(bob.locator(".people")).to_contain_text(b)
    web.shot(bob, "followers")
    bob.goto(f"/u/{b}/following")
    expect(bob.locator(".people")).to_contain_text(a)
    bob.goto("/find")
    bob.get_by_label("Username, or how it starts").fill(a[:-3])
    bob.get_by_role("button", name="Find").click()
    expect(bob.locator("section", has_text="Usernames starting with")).to_contain_text(a)
    bob.get_by_label("Username, or how it starts").fill(a.upper())
    bob.get_by_role("button", name="Find").click()
    exact = bob.locator(".person")
    expect(exact).to_contain_text(a)
    expect(exact.get_by_role("button", name="Unfollow")).to_be_visible()
    assert unlabelled_controls(bob) == []
    web.shot(bob, "find")

    # Unfollow: the button turns back into Follow, and Ann's tweets leave Bob's Home.
    bob.goto(f"/u/{a}")
    submit(bob, bob.get_by_role("button", name="Unfollow").click)
    expect(bob.get_by_role("button", name="Follow", exact=True)).to_be_visible()
    expect(bob.locator(".tabs")).to_contain_text("0 followers")
    reload_until(bob, "/", lambda: bob.locator("li.tweet").count() == 0, "Ann's tweets gone from Bob's home")

    # Ann deletes her first tweet (on page 2 of her own page).
    ann.goto(f"/u/{a}?limit=5")
    expect(ann.locator("li.tweet").first.get_by_role("button", name="Delete")).to_be_visible()
    web.shot(ann, "user-own")
    ann.goto(f"/u/{a}")
    ann.get_by_role("link", name="More").click()
    item = ann.locator(f"li#t-{tweet_id}")
    expect(item).to_contain_text(text)
    submit(ann, item.get_by_role("button", name="Delete").click)
    expect(ann).to_have_url(re.compile(r"\?cursor="))  # back where she was
    expect(ann.locator(f"li#t-{tweet_id}")).to_have_count(0)
    assert api.request("GET", f"/v1/tweets/{tweet_id}").status_code == 404
    ann.goto("/public?limit=100")
    expect(ann.locator(f"li#t-{tweet_id}")).to_have_count(0)
    # Nobody else gets a Delete button on her tweets.
    bob.goto(f"/u/{a}")
    expect(bob.get_by_role("button", name="Delete")).to_have_count(0)

    # Sign out: the session ends at once, also for the API.
    submit(ann, ann.get_by_role("button", name="Sign out").click)
    expect(ann.get_by_role("navigation", name="Main").get_by_role("link", name="Sign in")).to_be_visible()
    assert "fanline_session" not in {c["name"] for c in ann_context.cookies()}
    assert api.request("GET", "/v1/timeline", session["value"]).status_code == 401
    web.shot(ann, "signed-out")


# --- forms, errors and security ------------------------------------------------------------


def test_form_errors_use_the_api_validation(web: Web, api: Api) -> None:
    page = web.page()
    taken = api.sign_up(unique("tk"))
    signup = page.locator("form[action='/signup']")

    response = sign_up(page, unique("sp"), "short")
    assert response.status == 422
    expect(signup.locator(".error")).to_have_text("password must be 8-256 characters")

    name = unique("mm")
    response = sign_up(page, name, PASSWORD, PASSWORD + "x")
    assert response.status == 422
    expect(signup.locator(".error")).to_have_text("the two passwords do not match")
    expect(signup.get_by_label("Username")).to_have_value(name)  # kept for the next try

    response = sign_up(page, taken.upper())
    assert response.status == 409
    expect(signup.locator(".error")).to_have_text(f"username '{taken.upper()}' is taken")

    response = sign_up(page, "no spaces here")
    assert response.status == 422
    expect(signup.locator(".error")).to_have_text("username must be 1-15 characters of A-Z, a-z, 0-9 and _")
    web.shot(page, "login-errors")

    response = sign_in(page, taken, "wrong password")
    assert response.status == 401
    expect(page.locator("form[action='/login'] .error")).to_have_text("wrong username or password")

    # A tweet over 280 characters: the counter warns, the server refuses, the draft stays.
    assert sign_in(page, taken).status == 303
    page.goto("/")
    too_long = "x" * 281
    page.get_by_label("What's happening?").fill(too_long)
    expect(page.locator("#body-counter")).to_have_text("1 character too many")
    response = submit(page, page.get_by_role("button", name="Post Tweet").click)
    assert response.status == 422
    expect(page.locator(".compose .error")).to_have_text("body must be 1-280 characters after trimming")
    expect(page.get_by_label("What's happening?")).to_have_value(too_long)
    web.shot(page, "post-error")
    assert api.page(f"/v1/users/{taken}/tweets")["items"] == []


def test_forms_without_the_csrf_token_are_rejected(web: Web, api: Api) -> None:
    context = web.context()
    page = context.new_page()
    name = unique("cs")
    sign_up(page, name)

    # Straight POSTs with the browser's cookies but no (or a wrong) token.
    forged: list[dict[str, str | float | bool]] = [{"body": "forged"}, {"body": "forged", "csrf": "x.y"}]
    for fields in forged:
        response = context.request.post("/tweets", form=fields, max_redirects=0)
        assert response.status == 403
        assert "<html" in response.text() and "did not come from Fanline" in response.text()
    assert context.request.post("/logout", max_redirects=0).status == 403

    # A token minted for another session does not verify for this one.
    other = web.context()
    other_page = other.new_page()
    other_page.goto("/login")
    foreign = other_page.locator("form[action='/login'] input[name=csrf]").get_attribute("value")
    response = context.request.post("/tweets", form={"body": "forged", "csrf": foreign or ""}, max_redirects=0)
    assert response.status == 403

    # A real cross-site form: a page elsewhere posting into Fanline.
    attacker = context.new_page()
    attacker.set_content(f'<form method="post" action="{web.base_url}/tweets"><input name="body" value="pwned"></form>')
    with attacker.expect_navigation() as navigation:
        attacker.evaluate("document.forms[0].submit()")
    assert navigation.value is not None and navigation.value.status == 403
    expect(attacker.get_by_role("heading", name="Not allowed")).to_be_visible()
    web.shot(attacker, "csrf-rejected")

    # Nothing was posted, and the user is still signed in.
    assert api.page(f"/v1/users/{name}/tweets")["items"] == []
    page.goto("/")
    expect(page.get_by_role("heading", name="Home")).to_be_visible()


def test_session_cookie_is_secure_over_https(system: Any, api: Api) -> None:
    name = api.sign_up(unique("hs"))
    with httpx.Client(base_url=system.url(), headers={"X-Forwarded-Proto": "https"}) as client:
        page = client.get("/login")
        csrf_cookie = page.headers["set-cookie"]
        assert "fanline_csrf=" in csrf_cookie and "Secure" in csrf_cookie and "HttpOnly" in csrf_cookie
        match = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert match is not None
        response = client.post(
            "/login",
            data={"csrf": match.group(1), "username": name, "password": PASSWORD},
            cookies={"fanline_csrf": match.group(1)},
        )
        assert response.status_code == 303 and response.headers["location"] == "/"
        session = next(c for c in response.headers.get_list("set-cookie") if c.startswith("fanline_session="))
        attributes = {part.strip().split("=")[0].lower() for part in session.split(";")}
        assert {"httponly", "secure", "path", "max-age"} <= attributes
        assert "samesite=lax" in session.lower() and "path=/" in session.lower()


def test_tweet_bodies_and_input_are_escaped(web: Web) -> None:
    context = web.context()
    page = context.new_page()
    dialogs: list[str] = []

    def on_dialog(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    name = unique("xs")
    sign_up(page, name)
    payload = '<script>alert(1)</script> <img src=x onerror="alert(2)"> & "quotes"'
    assert post(page, payload).status == 303
    expect(page.locator("li.tweet .body").first).to_have_text(payload)
    web.shot(page, "escaped")

    for path in (page.url, "/public", f"/u/{name}"):  # Home right after posting, before the fan-out
        raw = context.request.get(path).text()
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in raw, path
        assert "<script>alert(1)" not in raw and "<img src=x" not in raw, path
    raw = context.request.get("/find?q=<script>alert(3)</script>").text()
    assert "<script>alert(3)" not in raw and "&lt;script&gt;alert(3)" in raw
    response = context.request.get("/u/<img src=x onerror=alert(4)>")
    assert response.status == 404 and "<img" not in response.text() and "&lt;img" in response.text()
    page.goto(f"/u/{name}")
    assert dialogs == []


def test_a_user_named_like_a_route_reaches_their_page(web: Web, api: Api) -> None:
    for name in ("public", "login", "find"):
        r = api.request("POST", "/v1/users", json={"username": name, "password": PASSWORD})
        assert r.status_code in (201, 409), r.text  # 409: an earlier run made them
    page = web.page()
    sign_up(page, unique("rt"))

    response = page.goto("/u/public")
    assert response is not None and response.status == 200
    expect(page.get_by_role("heading", level=1)).to_have_text(re.compile("^public$", re.I))
    expect(page.locator(".tabs")).to_contain_text("tweets")
    web.shot(page, "user-named-public")
    if page.get_by_role("button", name="Unfollow").count():
        submit(page, page.get_by_role("button", name="Unfollow").click)
    submit(page, page.get_by_role("button", name="Follow", exact=True).click)
    expect(page).to_have_url(re.compile(r"/u/public$"))
    expect(page.get_by_role("button", name="Unfollow")).to_be_visible()

    for name in ("LOGIN", "find"):
        page.goto(f"/u/{name}")
        expect(page.get_by_role("heading", level=1)).to_have_text(re.compile(f"^{name}$", re.I))
    page.goto("/public")
    expect(page.get_by_role("heading", name="Public timeline")).to_be_visible()

    response = page.goto(f"/u/{unique('nobody')}")
    assert response is not None and response.status == 404
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    expect(page.locator("main")).to_contain_text("no user named")
    web.shot(page, "not-found")


def test_phone_width_and_no_javascript(web: Web, api: Api) -> None:
    name, token = api.user("ph")
    api.post(token, "Short messages read fine on a phone, even a rather long one that has to wrap over several lines.")
    page = web.page(viewport=PHONE, is_mobile=True, has_touch=True)
    page.goto("/login")
    assert no_horizontal_scroll(page)
    web.shot(page, "phone-login")
    sign_in(page, name)
    for path, shot in (
        ("/", "phone-home"),
        ("/public", "phone-public"),
        (f"/u/{name}", "phone-user"),
        (f"/find?q={name}", "phone-find"),
    ):
        page.goto(path)
        assert no_horizontal_scroll(page), path
        web.shot(page, shot)
    # The navigation stays usable (not hidden behind a menu that needs script).
    for link in ("Home", "Public", "Find friends"):
        expect(page.get_by_role("navigation", name="Main").get_by_role("link", name=link)).to_be_visible()

    # Without JavaScript everything still works; only the counter is missing.
    plain = web.page(java_script_enabled=False)
    other = unique("nj")
    assert sign_up(plain, other).status == 303
    expect(plain.locator("#body-counter")).to_be_hidden()
    assert post(plain, "posted without JavaScript").status == 303
    expect(plain.locator("li.tweet").first).to_contain_text("posted without JavaScript")
    plain.goto(f"/u/{name}")
    submit(plain, plain.get_by_role("button", name="Follow", exact=True).click)
    expect(plain.get_by_role("button", name="Unfollow")).to_be_visible()
    eventually(lambda: len(api.page(f"/v1/users/{other}/following")["items"]) == 1, what="follow stored")


def test_bad_input_gets_a_friendly_page_never_a_500(system: Any, api: Api) -> None:
    name = api.sign_up(unique("bi"))
    cases = {
        "/public?cursor=not-a-cursor": 400,
        "/?cursor=x": 400,
        "/public?limit=0": 422,
        "/public?limit=abc": 422,
        "/u/no%20such%20user!": 404,
        f"/u/{name}?cursor=bad": 400,
        f"/u/{name}/followers?cursor=bad": 400,
        f"/u/{name}/following?limit=1000": 422,
        "/find?q=not%20valid!": 422,
        "/find?q=" + "x" * 300: 422,
    }
    with httpx.Client(base_url=system.url()) as client:
        for path, status in cases.items():
            response = client.get(path)
            assert response.status_code == status, path
            assert response.headers["content-type"].startswith("text/html"), path
            assert "<h1>" in response.text and "Traceback" not in response.text, path
        # A session cookie that signs nobody in: signed-out pages, and the cookie is cleared.
        response = client.get("/", cookies={"fanline_session": "expired-or-made-up"})
        assert response.status_code == 200 and "Public timeline" in response.text
        assert any(c.startswith('fanline_session=""') or "Max-Age=0" in c for c in response.headers.get_list("set-cookie"))
