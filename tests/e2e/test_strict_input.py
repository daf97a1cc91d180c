"""Strict input, never a 500, and nobody let in (issue #15), on both backends:

* every ``/internal`` route of social-graph and tweet-store, called over the
  network like any other process would, refuses a caller without the
  service credential; the gateway (which has it) works;
* usernames with control or invisible characters are 422;
* crafted cookies and headers never produce a 500 on a page or an API route;
* every 405 carries ``Allow``.

(The public ``/readyz`` naming no internal host is in test_degraded.py,
which stops a dependency.)
"""

from __future__ import annotations

import httpx
import pytest

from deploy.local.system import System

from .client import Api

pytestmark = [pytest.mark.e2e]

# One of each kind of internal route (users, sessions, follows, tweets,
# timelines, home rows, counts, outbox); tests/unit/test_internal_auth.py
# enumerates every route of the apps.
INTERNAL = {
    "social-graph": [
        ("POST", "/internal/users"),
        ("GET", "/internal/users"),
        ("GET", "/internal/users/alice"),
        ("GET", "/internal/users/alice/followers"),
        ("PUT", "/internal/users/alice/following/bob"),
        ("DELETE", "/internal/users/alice/following/bob"),
        ("POST", "/internal/sessions"),
        ("GET", "/internal/sessions/current"),
        ("DELETE", "/internal/sessions/current"),
        ("GET", "/internal/outbox"),
        ("POST", "/internal/outbox/ack"),
    ],
    "tweet-store": [
        ("POST", "/internal/tweets"),
        ("GET", "/internal/tweets/1044da6b-e61b-11f1-9151-88a70954b0ca"),
        ("DELETE", "/internal/tweets/1044da6b-e61b-11f1-9151-88a70954b0ca?actor=alice"),
        ("GET", "/internal/public"),
        ("GET", "/internal/userline/alice"),
        ("GET", "/internal/home/alice"),
        ("POST", "/internal/home/add"),
        ("POST", "/internal/home/remove"),
        ("POST", "/internal/home/alice/merge"),
        ("POST", "/internal/home/alice/purge"),
        ("GET", "/internal/counts?usernames=alice"),
        ("GET", "/internal/outbox"),
        ("POST", "/internal/outbox/ack"),
    ],
}


def test_internal_routes_refuse_callers_without_the_credential(system: System, api: Api) -> None:
    me, token = api.user("ia")
    tweet = api.post(token, "only the gateway may write this")
    with httpx.Client(timeout=30) as client:
        for service, routes in INTERNAL.items():
            for method, path in routes:
                for headers in ({}, {"X-Fanline-Internal-Token": "guess-guess-guess-guess"}):
                    r = client.request(method, system.url(service) + path, json={}, headers=headers)
                    assert r.status_code == 401, (service, method, path, r.status_code, r.text)
                    assert r.json()["error"]["code"] == "internal_unauthorized"
        # Nothing was done: the tweet is still there, and still only its author's.
        assert client.get(f"{system.url()}/v1/tweets/{tweet['id']}").status_code == 200
        r = client.get(f"{system.url('tweet-store')}/internal/tweets/{tweet['id']}", headers=system.internal_headers())
        assert r.status_code == 200 and r.json()["username"] == me
        assert client.get(system.url("tweet-store") + "/healthz").status_code == 200


@pytest.mark.parametrize(
    "name",
    [
        "carol\n",
        "carol\r",
        "\ncarol",
        "car\tol",
        "carol\u200b",
        "\u200bcarol",
        "car\u00adol",
        "carol\x00",
        "ca\u202erol",
        "carol\ufeff",
        "ｃarol",
    ],
)
def test_usernames_with_control_or_invisible_characters_are_422(api: Api, name: str) -> None:
    r = api.request("POST", "/v1/users", json={"username": name, "password": "correct horse"})
    assert r.status_code == 422, (name, r.text)
    assert r.json()["error"]["code"] == "invalid_username"
    r = api.request("POST", "/v1/sessions", json={"username": name, "password": "correct horse"})
    assert r.status_code == 401, r.text


CRAFTED_COOKIES = [
    'fanline_session="a\\012b"',
    'fanline_session="a\\015\\012b"',
    'fanline_session="\\000"',
    "fanline_session=a b",
    "fanline_session=" + "x" * 5000,
    'fanline_session="é"',
    'fanline_csrf="a\\012b"; fanline_session=zz.zz',
    'fanline_session="\\"',
    "=;;=; ;fanline_session",
]


@pytest.mark.parametrize("cookie", CRAFTED_COOKIES)
def test_crafted_cookies_never_produce_a_500(api: Api, cookie: str) -> None:
    for method, path in (
        ("GET", "/"),
        ("GET", "/public"),
        ("GET", "/find?q=a"),
        ("GET", "/login"),
        ("POST", "/logout"),
        ("POST", "/tweets"),
        ("GET", "/v1/public"),
        ("GET", "/v1/timeline"),
    ):
        r = api.request(method, path, headers={"Cookie": cookie.encode("utf-8")})
        assert r.status_code < 500, (cookie, method, path, r.status_code, r.text[:300])


# (an HTTP client cannot send most control characters in a header; the
# cookie's quoted-string escapes above are how they arrive)
@pytest.mark.parametrize(
    "authorization",
    ["Bearer a\tb", "Bearer " + "é" * 10, "Bearer a.b c", "Bearer \x85", "Basic abc", "Bearer", "Bearer " + "x" * 1000],
)
def test_crafted_authorization_headers_are_401_not_500(api: Api, authorization: str) -> None:
    for method, path in (("GET", "/v1/timeline"), ("POST", "/v1/tweets"), ("DELETE", "/v1/sessions/current")):
        r = api.request(method, path, headers={"Authorization": authorization.encode("utf-8")}, json={"body": "x"})
        assert r.status_code == 401, (authorization, method, path, r.status_code, r.text[:300])


def test_every_405_carries_allow(api: Api) -> None:
    cases = {
        "/v1/public": {"GET", "HEAD"},
        "/v1/users": {"GET", "HEAD", "POST"},
        "/v1/tweets": {"POST"},
        "/v1/sessions/current": {"DELETE"},
        "/v1/users/alice/following/bob": {"PUT", "DELETE"},
        "/v1/tweets/1044da6b-e61b-11f1-9151-88a70954b0ca": {"GET", "HEAD", "DELETE"},
        "/openapi.json": {"GET", "HEAD"},
        "/login": {"GET", "HEAD", "POST"},
        "/logout": {"POST"},
    }
    for path, allowed in cases.items():
        method = "PATCH"
        r = api.request(method, path)
        assert r.status_code == 405, (path, r.status_code)
        assert {m.strip() for m in r.headers["Allow"].split(",")} == allowed, (path, r.headers.get("Allow"))
        assert r.json()["error"]["code"] == "method_not_allowed"
