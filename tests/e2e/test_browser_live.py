"""Live web pages in Chromium (api.md "Live updates"; static/live.js): a post
made in one browser appears on a follower's Home in another browser without
a reload, a deleted tweet disappears, and pages without JavaScript stay
ordinary pages. Same browser and systems as test_browser.py."""

from __future__ import annotations

import uuid

from playwright.sync_api import expect

from .client import Api

# browser and web are the fixtures of test_browser.py, reused.
from .test_browser import Web, browser, post, reload_until, sign_in, sign_up, unique, web  # noqa: F401


def test_a_post_appears_on_a_followers_home_without_reload(web: Web, api: Api) -> None:  # noqa: F811 - the fixture
    author, fan = unique("liv"), unique("fan")
    writer, reader = web.page(), web.page()
    assert sign_up(writer, author).status == 303
    assert sign_up(reader, fan).status == 303
    api.follow(api.login(fan), fan, author)

    reader.goto("/")
    # Marks this document: a reload or navigation would lose the mark.
    reader.evaluate("window.__sameDocument = true")
    public = web.page()
    public.goto("/public")
    public.evaluate("window.__sameDocument = true")

    text = f"live in the browser {uuid.uuid4().hex[:6]}"
    assert post(writer, text).status == 303
    button = reader.get_by_role("button", name="Show 1 new tweet")
    expect(button).to_be_visible()
    web.shot(reader, "home-live-new-tweets")
    button.click()
    shown = reader.locator("li.tweet", has_text=text)
    expect(shown).to_have_count(1)
    expect(reader.locator("li.tweet").first).to_contain_text(text)
    expect(shown.locator(".who")).to_have_text(author)
    expect(button).to_be_hidden()
    assert reader.evaluate("window.__sameDocument") is True
    web.shot(reader, "home-live-shown")

    public.get_by_role("button", name="Show 1 new tweet").click()
    expect(public.locator("li.tweet", has_text=text)).to_have_count(1)

    # The author deletes it (from her own page, with the form): it disappears
    # from the follower's page and the public page without a reload. Her home
    # shows it once fanned out: the follower's live update comes from the
    # event at once, and under CI load a page loaded right after it was
    # sometimes earlier than the home row (written 0.6 s after the post).
    mine = writer.locator("li.tweet", has_text=text)
    reload_until(writer, "/", lambda: mine.count() == 1, "the author's tweet on her own home, once fanned out")
    with writer.expect_response(lambda r: r.request.method == "POST"):
        writer.locator("li.tweet", has_text=text).get_by_role("button", name="Delete").click()
    expect(shown).to_have_count(0)
    expect(public.locator("li.tweet", has_text=text)).to_have_count(0)
    assert reader.evaluate("window.__sameDocument") is True
    assert public.evaluate("window.__sameDocument") is True


def test_without_javascript_home_is_an_ordinary_page(web: Web, api: Api) -> None:  # noqa: F811 - the fixture
    name, token = api.user("nj")
    plain = web.page(java_script_enabled=False)
    sign_in(plain, name)
    expect(plain.locator(".new-tweets")).to_be_hidden()
    api.post(token, "seen after a reload")
    # No live update without script: the tweet shows after a reload (once fanned out).
    reload_until(
        plain, "/", lambda: plain.locator("li.tweet", has_text="seen after a reload").count() == 1, "the tweet after a reload"
    )
