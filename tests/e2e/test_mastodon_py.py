"""Mastodon.py (a client library we did not write) against the whole system,
on the session's embedded and real-engine systems: sign up and log in, post
with an idempotency key, look up and follow (a Relationship), page home and
public timelines with fetch_next / fetch_previous, since_id and min_id,
delete, unfollow, followers/following, search, an account's statuses and a
status's context, and scopes enforced on both APIs."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from mastodon import MastodonAPIError, MastodonNotFoundError

from .client import PASSWORD, Api, eventually
from .masto import app, client, raw, signed_up, unique, with_client

pytestmark = pytest.mark.e2e


def ids(page: Any) -> list[int]:
    return [int(s.id) for s in page]


def test_a_client_signs_in_posts_follows_pages_deletes_and_unfollows(masto_system: Any) -> None:
    url = masto_system.url()
    reader, reader_name = signed_up(url, email=f"{unique('e')}@example.org")
    author, author_name = signed_up(url)

    # Post with an Idempotency-Key: a repeat returns the first status.
    key = uuid.uuid4().hex
    first = author.status_post("first <b>hello</b> & welcome", idempotency_key=key)
    again = author.status_post("first <b>hello</b> & welcome", idempotency_key=key)
    assert again.id == first.id and first.content == "<p>first &lt;b&gt;hello&lt;/b&gt; &amp; welcome</p>"
    posted = [first] + [author.status_post(f"status {n}") for n in range(1, 6)]
    assert ids(posted) == sorted(ids(posted)), "ids rise with time"
    assert posted[2].url.endswith(f"/@{author_name}/{posted[2].id}")

    # Look the author up and follow: the answer is a Relationship.
    account = reader.account_lookup(author_name)
    assert account.username == author_name and account.acct == author_name
    relationship = reader.account_follow(account.id)
    assert relationship.following is True and relationship.followed_by is False
    assert reader.account_relationships([account.id])[0].following is True

    # The follow merges the author's statuses into the reader's home timeline.
    wanted = set(ids(posted))
    eventually(lambda: wanted <= set(ids(reader.timeline_home(limit=40))), timeout=30, what="the follow's merge")

    # Paging: 2 per page, next and previous, no gap, no repeat.
    page1 = reader.timeline_home(limit=2)
    page2 = reader.fetch_next(page1)
    page3 = reader.fetch_next(page2)
    seen = ids(page1) + ids(page2) + ids(page3)
    assert seen == sorted(wanted, reverse=True)[:6] and len(set(seen)) == 6
    back = reader.fetch_previous(page2)
    assert ids(back) == ids(page1)

    # since_id: the newest items newer than; min_id: the oldest newer than.
    middle = sorted(wanted)[2]
    newest = ids(reader.timeline_home(limit=2, since_id=middle))
    oldest = ids(reader.timeline_home(limit=2, min_id=middle))
    ordered = sorted(x for x in wanted if x > middle)
    assert newest == ordered[::-1][:2] and oldest == ordered[:2][::-1]

    # The public timeline pages the same way.
    public = reader.timeline_public(limit=3)
    assert len(public) == 3 and ids(public) == sorted(ids(public), reverse=True)
    assert set(ids(reader.fetch_next(public))).isdisjoint(ids(public))

    # Delete: the answer carries the text; the status is gone from everywhere.
    gone = author.status_delete(posted[3].id)
    assert gone.text == "status 3" and int(gone.id) == int(posted[3].id)
    with pytest.raises(MastodonNotFoundError):
        reader.status(posted[3].id)
    eventually(lambda: int(posted[3].id) not in ids(reader.timeline_home(limit=40)), what="the delete")

    # Unfollow: the author's statuses leave the reader's home timeline.
    assert reader.account_unfollow(account.id).following is False
    eventually(lambda: wanted.isdisjoint(ids(reader.timeline_home(limit=40))), timeout=30, what="the unfollow")

    me = reader.account_verify_credentials()
    assert me.username == reader_name and me.following_count == 0 and me.source.privacy == "public"


def test_tokens_work_on_both_apis_and_scopes_hold_on_both(masto_system: Any) -> None:
    url = masto_system.url()
    plain = Api(url)
    try:
        name, v1_token = plain.user("v")
        # A /v1/sessions token on the Mastodon API ...
        assert client(url, token=v1_token).account_verify_credentials().username == name
        # ... and an OAuth token on /v1.
        oauth, oauth_name = signed_up(url)
        tweet = plain.post(oauth.access_token, "through /v1 with an OAuth token")
        assert tweet["username"] == oauth_name
        # A read-only token reads, and gets 403 on a post, on both APIs.
        read_only, _ = signed_up(url, scopes=["read"])
        assert read_only.timeline_home() is not None
        with pytest.raises(MastodonAPIError) as refused:
            read_only.status_post("not allowed")
        assert refused.value.args[1] == 403
        response = plain.request("POST", "/v1/tweets", read_only.access_token, json={"body": "not allowed"})
        assert response.status_code == 403 and response.json()["error"]["code"] == "insufficient_scope"
        response = plain.request("PUT", f"/v1/users/{name}/following/{oauth_name}", read_only.access_token)
        assert response.status_code == 403
        # An app's own token registers accounts and reads public data, nothing else.
        credentials = app(url)
        with raw(url) as http:
            grant = http.post(
                "/oauth/token",
                data={
                    "grant_type": "client_credentials",
                    "scope": "read write",
                    "client_id": credentials[0],
                    "client_secret": credentials[1],
                },
            ).json()
        app_token = grant["access_token"]
        claimed, dot, _ = app_token.partition(".")
        assert not (dot and re.fullmatch(r"[A-Za-z0-9_]{1,15}", claimed)), "an app token never looks like a user's"
        with raw(url, app_token) as http:
            assert http.get("/api/v1/timelines/public").status_code == 200
            home = http.get("/api/v1/timelines/home")
            assert home.status_code == 422 and home.json() == {"error": "This method requires an authenticated user"}
            assert http.post("/api/v1/statuses", data={"status": "x"}).status_code == 422
        assert plain.request("POST", "/v1/tweets", app_token, json={"body": "x"}).status_code == 401
        # Revoked (RFC 7009): refused on both APIs.
        token = oauth.access_token
        assert plain.request("GET", "/v1/timeline", token).status_code == 200
        oauth.revoke_access_token(allow_http=True)
        assert plain.request("GET", "/v1/timeline", token).status_code == 401
        with raw(url, token) as http:
            assert http.get("/api/v1/accounts/verify_credentials").status_code == 401
    finally:
        plain.close()


def test_the_password_grant_takes_an_email_and_counts_failed_log_ins(masto_system: Any) -> None:
    url = masto_system.url()
    address = f"{unique('e')}@example.org"
    _, name = signed_up(url, email=address)
    credentials = app(url)
    by_email = client(url, credentials)
    by_email.log_in(address.upper(), PASSWORD, allow_http=True)
    assert by_email.account_verify_credentials().username == name
    wrong = client(url, credentials)
    with pytest.raises(Exception, match="Invalid user name"):
        wrong.log_in(name, "not the password", allow_http=True)
    with raw(url) as http:
        answer = http.post(
            "/oauth/token",
            data={
                "grant_type": "password",
                "username": name,
                "password": "nope",
                "client_id": credentials[0],
                "client_secret": credentials[1],
            },
        )
        assert answer.status_code == 400 and answer.json()["error"] == "invalid_grant"
        bad_client = http.post("/oauth/token", data=with_client((credentials[0], "wrong"), grant_type="client_credentials"))
        assert bad_client.status_code == 401 and bad_client.json()["error"] == "invalid_client"


def test_discovery_instance_and_edge_headers(masto_system: Any) -> None:
    url = masto_system.url()
    api, _ = signed_up(url)
    instance = api.instance()
    assert instance.version.startswith("4.3.0 (compatible; Fanline ")
    assert instance.configuration.statuses.max_characters == 280
    v2 = api.instance_v2()
    assert v2.configuration.urls.streaming.startswith("ws://")
    info = api.oauth_authorization_server_info()
    assert {"password", "authorization_code", "client_credentials"} <= set(info.grant_types_supported)
    assert "S256" in info.code_challenge_methods_supported
    assert api.stream_healthy()
    with raw(url, api.access_token) as http:
        response = http.get("/api/v1/timelines/home", headers={"Origin": "https://elk.example"})
        assert {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"} <= set(response.headers)
        assert response.headers["access-control-allow-origin"] == "*"
        assert "access-control-allow-origin" not in http.get("/public", headers={"Origin": "https://elk.example"}).headers
        missing = http.get("/api/v1/statuses/1")
        assert missing.status_code == 404 and missing.json() == {"error": "Record not found"}
        private = http.post("/api/v1/statuses", json={"status": "hi", "visibility": "private"})
        assert private.status_code == 422 and "public" in private.json()["error"]
        for path in ("/api/v1/notifications", "/api/v1/lists", "/api/v2/filters", "/api/v1/custom_emojis", "/api/v1/trends/tags"):
            assert http.get(path).json() == [], path
        assert http.get("/api/v1/markers").json() == {}
        posted = http.post("/api/v1/statuses", data={"status": "to favourite"}).json()
        refused = http.post(f"/api/v1/statuses/{posted['id']}/favourite")
        assert refused.status_code == 422 and "not supported" in refused.json()["error"]
        avatar = http.get(posted["account"]["avatar"].removeprefix(url))
        assert avatar.status_code == 200 and avatar.headers["content-type"] == "image/png"
        page = http.get(f"/@{posted['account']['username']}/{posted['id']}")
        assert page.status_code == 200 and "to favourite" in page.text


def every_page(api: Any, first: Any) -> list[Any]:
    """``first`` and every page ``fetch_next`` reaches from it (bounded)."""
    pages = [first]
    for _ in range(20):
        following = api.fetch_next(pages[-1])
        if not following:
            return [item for page in pages for item in page]
        pages.append(following)
    raise AssertionError("fetch_next never ended")


def test_followers_following_search_account_statuses_and_context(masto_system: Any) -> None:
    """What ``toot follow``/``whois`` and apps' profile screens read:
    followers and following paged by ``Link``, the accounts search, an
    account's statuses paged, and a status's (empty) context."""
    url = masto_system.url()
    author, author_name = signed_up(url)
    plain = Api(url)
    try:
        fans: list[str] = []
        for _ in range(5):
            fan, fan_token = plain.user("fa")
            plain.follow(fan_token, fan, author_name)
            fans.append(fan)
    finally:
        plain.close()
    me = author.account_verify_credentials()

    followers = every_page(author, author.account_followers(me.id, limit=2))
    assert sorted(a.username for a in followers) == sorted(fans) and len(followers) == 5
    fan_account = author.account_lookup(fans[0])
    assert [a.username for a in author.account_following(fan_account.id)] == [author_name]
    assert author.account_relationships([fan_account.id])[0].followed_by is True

    found = author.search_v2(author_name, result_type="accounts")
    assert [a.username for a in found.accounts] == [author_name] and found.statuses == [] and found.hashtags == []

    posted = [author.status_post(f"mine {n}") for n in range(5)]
    mine = every_page(author, author.account_statuses(me.id, limit=2))
    assert ids(mine) == sorted(ids(posted), reverse=True)
    context = author.status_context(posted[0].id)
    assert context.ancestors == [] and context.descendants == []
