"""Every rule of api.md, through the public HTTP API, on both backends."""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx
import pytest

from .client import PASSWORD, Api, eventually


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) >= {"error"} and set(body["error"]) == {"code", "message"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code, body


# --- errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [b"{", b"not json", b"\xff\xfe", b""],
    ids=["truncated", "text", "binary", "empty"],
)
def test_body_that_is_not_json_is_400_invalid_json(api: Api, content: bytes) -> None:
    r = api.request("POST", "/v1/users", content=content, headers={"content-type": "application/json"})
    assert_error(r, 400, "invalid_json")


@pytest.mark.parametrize("value", [[], "x", 1, None], ids=["array", "string", "number", "null"])
def test_json_that_is_not_an_object_is_400(api: Api, value: object) -> None:
    assert_error(api.request("POST", "/v1/users", content=json.dumps(value)), 400, "invalid_json")


def test_body_over_64_kib_is_413(api: Api) -> None:
    _, token = api.user()
    big = json.dumps({"body": "x" * (65 * 1024)})
    assert_error(api.request("POST", "/v1/tweets", token, content=big), 413, "payload_too_large")
    assert_error(api.request("POST", "/v1/users", content=big), 413, "payload_too_large")


def test_unknown_route_is_404_in_the_error_shape(api: Api) -> None:
    assert_error(api.request("GET", "/v1/nope"), 404)


# --- users and sessions -----------------------------------------------------------------


def test_sign_up_returns_the_user_with_zero_counts(api: Api) -> None:
    name = api.unique_name("Ab")
    r = api.request("POST", "/v1/users", json={"username": name, "password": PASSWORD})
    assert r.status_code == 201
    user = r.json()
    assert user["username"] == name
    assert (user["followers_count"], user["following_count"], user["tweets_count"]) == (0, 0, 0)
    assert user["created_at"].endswith("Z")


@pytest.mark.parametrize(
    ("username", "password", "code"),
    [
        ("", PASSWORD, "invalid_username"),
        ("x" * 16, PASSWORD, "invalid_username"),
        ("bad-name", PASSWORD, "invalid_username"),
        ("émile", PASSWORD, "invalid_username"),
        (123, PASSWORD, "invalid_username"),
        ("okname", "short", "invalid_password"),
        ("okname", "x" * 257, "invalid_password"),
        ("okname", None, "invalid_password"),
    ],
    ids=["empty", "too-long", "dash", "non-ascii", "number", "short-password", "long-password", "no-password"],
)
def test_sign_up_validation(api: Api, username: object, password: object, code: str) -> None:
    assert_error(api.request("POST", "/v1/users", json={"username": username, "password": password}), 422, code)


def test_usernames_are_unique_case_insensitively_and_keep_display_case(api: Api) -> None:
    name = api.unique_name("Mx")
    api.sign_up(name)
    assert_error(api.request("POST", "/v1/users", json={"username": name.lower(), "password": PASSWORD}), 409, "username_taken")
    assert api.page(f"/v1/users/{name.upper()}")["username"] == name
    r = api.request("POST", "/v1/sessions", json={"username": name.upper(), "password": PASSWORD})
    assert r.status_code == 200 and r.json()["username"] == name


def test_boundary_usernames_and_passwords_are_accepted(api: Api) -> None:
    name = api.unique_name("b")[:15].ljust(15, "_")
    api.sign_up(name, "p" * 8)
    api.sign_up(api.unique_name("c"), "p" * 256)


def test_login_and_logout(api: Api) -> None:
    name = api.sign_up()
    r = api.request("POST", "/v1/sessions", json={"username": name, "password": PASSWORD})
    assert r.status_code == 200
    session = r.json()
    assert session["username"] == name and session["expires_at"].endswith("Z") and session["token"]
    token = session["token"]
    assert api.request("GET", "/v1/timeline", token).status_code == 200
    assert api.request("DELETE", "/v1/sessions/current", token).status_code == 204
    assert_error(api.request("GET", "/v1/timeline", token), 401, "unauthorized")
    assert_error(api.request("DELETE", "/v1/sessions/current", token), 401)


def test_wrong_username_and_wrong_password_get_the_same_401(api: Api) -> None:
    name = api.sign_up()
    wrong_pw = api.request("POST", "/v1/sessions", json={"username": name, "password": "wrong password"})
    no_user = api.request("POST", "/v1/sessions", json={"username": api.unique_name(), "password": PASSWORD})
    assert_error(wrong_pw, 401)
    assert_error(no_user, 401)
    assert wrong_pw.json() == no_user.json()


@pytest.mark.parametrize(
    "header",
    [None, "Bearer", "Bearer a b", "Basic abc", "Bearer not-a-token", "bearer " + "x" * 500],
    ids=["missing", "no-token", "two-parts", "basic", "unknown", "huge"],
)
def test_bad_tokens_are_401(api: Api, header: str | None) -> None:
    headers = {"Authorization": header} if header is not None else {}
    assert_error(api.request("GET", "/v1/timeline", headers=headers), 401, "unauthorized")
    assert_error(api.request("POST", "/v1/tweets", json={"body": "x"}, headers=headers), 401, "unauthorized")


def test_get_user_and_unknown_user(api: Api) -> None:
    name = api.sign_up()
    assert api.page(f"/v1/users/{name}")["username"] == name
    assert_error(api.request("GET", f"/v1/users/{api.unique_name()}"), 404, "user_not_found")
    assert_error(api.request("GET", "/v1/users/not-valid!"), 404, "user_not_found")


def test_lookup_many_users_in_order_asked(api: Api) -> None:
    a, b, c = api.sign_up(), api.sign_up(), api.sign_up()
    ghost = api.unique_name()
    items = api.page("/v1/users", usernames=f"{c},{ghost},{a.upper()},{b}")["items"]
    assert [u["username"] for u in items] == [c, a, b]
    too_many = ",".join(f"n{i}" for i in range(101))
    assert_error(api.request("GET", "/v1/users", params={"usernames": too_many}), 422)


# --- the social graph ---------------------------------------------------------------------


def test_follow_unfollow_idempotent_with_counts_and_lists(api: Api) -> None:
    me, token = api.user()
    other = api.sign_up()
    for _ in range(2):
        api.follow(token, me, other)
    assert api.page(f"/v1/users/{me}")["following_count"] == 1
    assert api.page(f"/v1/users/{other}")["followers_count"] == 1
    following = api.page(f"/v1/users/{me}/following")
    assert [e["username"] for e in following["items"]] == [other] and following["next_cursor"] is None
    assert following["items"][0]["since"].endswith("Z")
    assert [e["username"] for e in api.page(f"/v1/users/{other}/followers")["items"]] == [me]
    for _ in range(2):
        api.unfollow(token, me, other)
    assert api.page(f"/v1/users/{me}")["following_count"] == 0
    assert api.page(f"/v1/users/{other}/followers")["items"] == []


def test_follow_errors(api: Api) -> None:
    me, token = api.user()
    other = api.sign_up()
    assert_error(api.request("PUT", f"/v1/users/{me}/following/{api.unique_name()}", token), 404, "user_not_found")
    assert_error(api.request("PUT", f"/v1/users/{me}/following/{me}", token), 422, "cannot_follow_self")
    assert_error(api.request("PUT", f"/v1/users/{me}/following/{me.upper()}", token), 422, "cannot_follow_self")
    assert_error(api.request("PUT", f"/v1/users/{other}/following/{me}", token), 403, "forbidden")
    assert_error(api.request("PUT", f"/v1/users/{me}/following/{other}"), 401)


def test_follow_lists_page_with_cursors(api: Api) -> None:
    star = api.sign_up()
    fans = []
    for _ in range(7):
        name, token = api.user()
        api.follow(token, name, star)
        fans.append(name)
    seen = api.all_items(f"/v1/users/{star}/followers", limit=3)
    assert sorted(e["username"] for e in seen) == sorted(fans)
    assert len(seen) == len({e["username"] for e in seen})
    assert_error(api.request("GET", f"/v1/users/{star}/followers", params={"cursor": "forged"}), 400, "invalid_cursor")
    assert_error(api.request("GET", f"/v1/users/{api.unique_name()}/followers"), 404, "user_not_found")


# --- tweets -------------------------------------------------------------------------------


def test_post_get_delete_tweet(api: Api) -> None:
    me, token = api.user()
    tweet = api.post(token, "  hello world \n")
    assert tweet["body"] == "hello world" and tweet["username"] == me
    assert uuid.UUID(tweet["id"]).version == 1 and tweet["created_at"].endswith("Z")
    assert api.page(f"/v1/tweets/{tweet['id']}") == tweet
    assert api.request("DELETE", f"/v1/tweets/{tweet['id']}", token).status_code == 204
    assert_error(api.request("GET", f"/v1/tweets/{tweet['id']}"), 404, "tweet_not_found")
    assert_error(api.request("DELETE", f"/v1/tweets/{tweet['id']}", token), 404, "tweet_not_found")


@pytest.mark.parametrize(
    ("body", "ok"),
    [("x" * 280, True), ("😀" * 280, True), ("x" * 281, False), ("   ", False), ("", False), (None, False), (5, False)],
    ids=["280-ascii", "280-emoji", "281", "blank", "empty", "null", "number"],
)
def test_tweet_body_rules(api: Api, body: object, ok: bool) -> None:
    _, token = api.user()
    r = api.request("POST", "/v1/tweets", token, json={"body": body})
    if ok:
        assert r.status_code == 201, r.text
    else:
        assert_error(r, 422, "invalid_body")


@pytest.mark.parametrize(
    "raw", ["nope", "00000000-0000-0000-0000-000000000000", str(uuid.uuid4())], ids=["garbage", "nil-uuid", "uuid4"]
)
def test_malformed_or_unknown_tweet_id_is_404(api: Api, raw: str) -> None:
    assert_error(api.request("GET", f"/v1/tweets/{raw}"), 404, "tweet_not_found")


def test_ids_sort_by_creation_time(api: Api) -> None:
    _, token = api.user()
    ids = [uuid.UUID(api.post(token, f"t{i}")["id"]) for i in range(3)]
    assert [u.time for u in ids] == sorted(u.time for u in ids)


def test_idempotency_key_returns_the_first_tweet(api: Api) -> None:
    me, token = api.user()
    _, other_token = api.user()
    first = api.post(token, "once", key="k-1")
    again = api.request("POST", "/v1/tweets", token, json={"body": "different"}, headers={"Idempotency-Key": "k-1"})
    assert again.status_code in (200, 201) and again.json()["id"] == first["id"]
    assert again.json()["body"] == "once"
    theirs = api.post(other_token, "once", key="k-1")  # keys are per user
    assert theirs["id"] != first["id"]
    assert api.page(f"/v1/users/{me}")["tweets_count"] == 1
    bad = api.request("POST", "/v1/tweets", token, json={"body": "x"}, headers={"Idempotency-Key": "k" * 65})
    assert_error(bad, 422)


# --- timelines -----------------------------------------------------------------------------


@pytest.mark.parametrize("limit", ["0", "101", "-1", "abc", "1.5"])
def test_limit_out_of_range_is_422(api: Api, limit: str) -> None:
    _, token = api.user()
    for path, tok in (("/v1/public", None), ("/v1/timeline", token)):
        assert_error(api.request("GET", path, tok, params={"limit": limit}), 422, "invalid_limit")


@pytest.mark.parametrize("cursor", ["garbage", "", "AAAA", "x" * 300])
def test_forged_cursor_is_400(api: Api, cursor: str) -> None:
    assert_error(api.request("GET", "/v1/public", params={"cursor": cursor}), 400, "invalid_cursor")


def test_cursor_from_another_list_is_rejected(api: Api) -> None:
    me, token = api.user()
    for i in range(3):
        api.post(token, f"p{i}")
    cursor = api.page(f"/v1/users/{me}/tweets", limit=1)["next_cursor"]
    assert cursor
    assert_error(api.request("GET", "/v1/public", params={"cursor": cursor}), 400, "invalid_cursor")


def test_userline_pages_exactly_once_newest_first_even_while_posting(api: Api) -> None:
    me, token = api.user()
    posted = [api.post(token, f"tweet {i}")["id"] for i in range(25)]
    first = api.page(f"/v1/users/{me}/tweets", limit=10)
    assert len(first["items"]) == 10
    api.post(token, "new while paging")  # must not shift later pages
    items = list(first["items"])
    cursor = first["next_cursor"]
    while cursor:
        page = api.page(f"/v1/users/{me}/tweets", limit=10, cursor=cursor)
        items.extend(page["items"])
        cursor = page["next_cursor"]
    assert [t["id"] for t in items] == list(reversed(posted))
    assert api.page(f"/v1/users/{me}/tweets")["items"].__len__() == 20  # default limit


def test_public_timeline_has_every_tweet_newest_first(api: Api) -> None:
    _, token = api.user()
    ids = [api.post(token, f"public {i}")["id"] for i in range(5)]
    latest = [t["id"] for t in api.page("/v1/public", limit=100)["items"]]
    assert [i for i in latest if i in ids] == list(reversed(ids))


def test_home_timeline_semantics_follow_merge_unfollow_delete(api: Api) -> None:
    author, author_token = api.user("a")
    reader, reader_token = api.user("r")
    older = [api.post(author_token, f"before follow {i}")["id"] for i in range(55)]
    own = api.post(reader_token, "my own")["id"]

    api.follow(reader_token, reader, author)
    # Follow merges the author's recent tweets (at least the last 50), in time order.
    eventually(lambda: set(older[-50:]) <= set(api.home_ids(reader_token)), what="merge after follow")
    # The reader's own tweet reaches their home through its own fan-out,
    # which may still be on its way after the merge (another partition).
    eventually(lambda: own in api.home_ids(reader_token), what="own tweet in own home")
    home = api.home_ids(reader_token)
    assert home == sorted(home, key=lambda i: uuid.UUID(i).time, reverse=True)

    fresh = api.post(author_token, "after follow")["id"]
    eventually(lambda: fresh in api.home_ids(reader_token), what="new tweet delivered")

    api.request("DELETE", f"/v1/tweets/{fresh}", author_token)
    eventually(lambda: fresh not in api.home_ids(reader_token), what="deleted tweet gone")
    assert fresh not in [t["id"] for t in api.page("/v1/public", limit=100)["items"]]
    assert fresh not in [t["id"] for t in api.page(f"/v1/users/{author}/tweets", limit=100)["items"]]

    api.unfollow(reader_token, reader, author)
    eventually(lambda: not set(older) & set(api.home_ids(reader_token)), what="unfollowed tweets gone")
    assert api.home_ids(reader_token) == [own]

    full = api.all_items("/v1/timeline", reader_token, limit=7)
    assert len(full) == len({t["id"] for t in full})


# --- authorization ------------------------------------------------------------------------


def test_no_route_lets_a_act_as_b(api: Api) -> None:
    a, a_token = api.user("a")
    b, b_token = api.user("b")
    c = api.sign_up()
    api.follow(b_token, b, c)
    b_tweet = api.post(b_token, "b's tweet")

    assert_error(api.request("PUT", f"/v1/users/{b}/following/{a}", a_token), 403, "forbidden")
    assert_error(api.request("DELETE", f"/v1/users/{b}/following/{c}", a_token), 403, "forbidden")
    assert_error(api.request("DELETE", f"/v1/tweets/{b_tweet['id']}", a_token), 403, "forbidden")
    # Posting always acts as the token's user, whatever the body claims.
    posted = api.request("POST", "/v1/tweets", a_token, json={"body": "hi", "username": b}).json()
    assert posted["username"] == a
    # A token names its user, but changing the name grants nothing.
    forged = f"{b}.{a_token.partition('.')[2]}"
    assert_error(api.request("GET", "/v1/timeline", forged), 401, "unauthorized")
    assert_error(api.request("POST", "/v1/tweets", forged, json={"body": "as b?"}), 401, "unauthorized")
    # Logging out revokes only the caller's own token.
    assert api.request("DELETE", "/v1/sessions/current", a_token).status_code == 204
    assert api.request("GET", "/v1/timeline", b_token).status_code == 200
    # Nothing changed for b.
    assert api.page(f"/v1/tweets/{b_tweet['id']}")["id"] == b_tweet["id"]
    assert [e["username"] for e in api.page(f"/v1/users/{b}/following")["items"]] == [c]


# --- concurrency ----------------------------------------------------------------------------


def test_eight_simultaneous_sign_ups_of_one_name_create_one_user(api: Api) -> None:
    name = api.unique_name("race")

    async def race() -> list[int]:
        async with httpx.AsyncClient(base_url=api.base_url, timeout=30) as client:
            responses = await asyncio.gather(
                *(
                    client.post("/v1/users", json={"username": name if i % 2 else name.upper(), "password": PASSWORD})
                    for i in range(8)
                )
            )
            return sorted(r.status_code for r in responses)

    assert asyncio.run(race()) == [201] + [409] * 7


def test_six_simultaneous_posts_with_one_key_create_one_tweet(api: Api) -> None:
    me, token = api.user()

    async def race() -> set[str]:
        async with httpx.AsyncClient(base_url=api.base_url, timeout=30) as client:
            responses = await asyncio.gather(
                *(
                    client.post(
                        "/v1/tweets",
                        json={"body": f"attempt {i}"},
                        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": "same-key"},
                    )
                    for i in range(6)
                )
            )
            assert all(r.status_code in (200, 201) for r in responses), [r.text for r in responses]
            return {r.json()["id"] for r in responses}

    assert len(asyncio.run(race())) == 1
    assert len(api.page(f"/v1/users/{me}/tweets")["items"]) == 1
    assert api.page(f"/v1/users/{me}")["tweets_count"] == 1


# --- operations -------------------------------------------------------------------------------


def test_openapi_describes_every_route(api: Api) -> None:
    doc = api.page("/openapi.json")
    assert doc["openapi"].startswith("3.1")
    expected = {
        ("/v1/users", "post"),
        ("/v1/users", "get"),
        ("/v1/users/{username}", "get"),
        ("/v1/users/{username}/following", "get"),
        ("/v1/users/{username}/followers", "get"),
        ("/v1/users/{username}/following/{target}", "put"),
        ("/v1/users/{username}/following/{target}", "delete"),
        ("/v1/users/{username}/tweets", "get"),
        ("/v1/sessions", "post"),
        ("/v1/sessions/current", "delete"),
        ("/v1/tweets", "post"),
        ("/v1/tweets/{tweet_id}", "get"),
        ("/v1/tweets/{tweet_id}", "delete"),
        ("/v1/timeline", "get"),
        ("/v1/public", "get"),
        ("/healthz", "get"),
        ("/readyz", "get"),
        ("/openapi.json", "get"),
        ("/v1/streaming/home", "get"),
        ("/v1/streaming/public", "get"),
    }
    described = {(path, method) for path, item in doc["paths"].items() for method in item}
    assert expected <= described
