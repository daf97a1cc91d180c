"""The Mastodon-compatible API's pieces that need no peers: scopes, request
parameters, entity rendering, Link headers, error bodies, rate-limit
headers, the generated images."""

from __future__ import annotations

import base64
import struct
import zlib
from datetime import UTC, datetime

import pytest
from starlette.requests import Request

from fanline_api.mastodon import entities, errors, images, oauth
from fanline_api.mastodon.context import link
from fanline_api.mastodon.params import Params, limit, status_id
from fanline_api.principal import InsufficientScope, NotAUser, Principal
from fanline_api.ratelimit import Decision
from fanline_shared import scopes
from fanline_shared.errors import BadRequest, Conflict, InvalidInput, NotFound, RateLimited, Unauthorized

# --- scopes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("granted", "need", "ok"),
    [
        ("read write follow push", scopes.WRITE_STATUSES, True),
        ("read", scopes.WRITE_STATUSES, False),
        ("read", scopes.READ_STATUSES, True),
        ("read:statuses", scopes.READ_STATUSES, True),
        ("read:accounts", scopes.READ_STATUSES, False),
        ("write:statuses", scopes.WRITE_STATUSES, True),
        ("write:statuses", scopes.WRITE_FOLLOWS, False),
        ("follow", scopes.WRITE_FOLLOWS, True),
        ("follow", scopes.READ_FOLLOWS, True),
        ("follow", scopes.READ_STATUSES, False),
        ("write", scopes.WRITE_FOLLOWS, True),
        ("push", scopes.READ_STATUSES, False),
    ],
)
def test_a_route_admits_a_token_whose_scopes_grant_one_of_its_scopes(granted: str, need: tuple[str, ...], ok: bool) -> None:
    assert scopes.grants(granted.split(), *need) is ok
    who = Principal("ann", "user", tuple(granted.split()))
    if ok:
        who.require(need)
    else:
        with pytest.raises(InsufficientScope):
            who.require(need)


def test_scopes_parse_dedupe_default_and_refuse_unknown_ones() -> None:
    assert scopes.parse("read write read") == ("read", "write")
    assert scopes.parse("read+write:statuses") == ("read", "write:statuses")
    assert scopes.parse(["read", "follow push"]) == ("read", "follow", "push")
    assert scopes.parse(None) == ("read",) and scopes.parse("  ") == ("read",)
    with pytest.raises(scopes.InvalidScope):
        scopes.parse("read admin:write")
    assert scopes.covers(["read", "write"], ["read:statuses", "write"])
    assert not scopes.covers(["read"], ["read", "write:statuses"])
    assert scopes.covers(["read", "write", "follow"], ["follow"])


def test_a_v1_session_token_has_every_scope_a_route_asks_for() -> None:
    full = Principal.from_grant({"username": "ann", "scopes": None, "kind": None})
    for need in (scopes.READ_STATUSES, scopes.WRITE_STATUSES, scopes.WRITE_FOLLOWS, scopes.READ_FOLLOWS, scopes.WRITE_ACCOUNTS):
        assert full.allows(need)
    assert full.kind == "user"


# --- parameters -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, 20), ("", 20), ("5", 5), ("40", 40), ("41", 40), ("1000", 40), ("-7", 7), ("0", 20), ("12abc", 12), ("abc", 20)],
)
def test_limit_clamps_like_mastodon(raw: str | None, expected: int) -> None:
    assert limit(Params({"limit": raw} if raw is not None else {})) == expected


def test_accounts_lists_allow_twice_as_many() -> None:
    assert limit(Params({"limit": "500"}), 40) == 80


def test_arrays_flags_and_text() -> None:
    p = Params({"id[]": ["1", "2"], "id": ["1", "2"], "local": "true", "only_media": "0", "sensitive": True, "n": 5})
    assert p.list("id") == ["1", "2"]
    assert Params({"id": "7"}).list("id") == ["7"]
    assert p.flag("local") and not p.flag("only_media") and p.flag("sensitive") and not p.flag("missing")
    assert p.text("n") == "5" and p.text("sensitive") == "true"
    with pytest.raises(InvalidInput):
        Params({"status": {"a": 1}}).text("status")


@pytest.mark.parametrize("raw", ["12a", "-1", "1" * 20, "１２"])
def test_ids_are_digits_or_422(raw: str) -> None:
    with pytest.raises(InvalidInput):
        status_id(raw, "max_id")
    assert status_id("", "max_id") is None and status_id("42", "max_id") == 42


# --- entities -----------------------------------------------------------------------

PROFILE = {
    "username": "Ann_1",
    "created_at": "2026-11-26T13:34:22.388451Z",
    "followers_count": 3,
    "following_count": 4,
    "tweets_count": 5,
    "id": "117440810532227399",
}
TWEET = {
    "id": "f9770354-e9aa-11f1-8f03-2703d9e6a41d",
    "username": "Ann_1",
    "body": "<script>alert(1)</script> & more\nline two\n\nsecond paragraph",
    "created_at": "2026-11-26T13:34:22.388451Z",
    "sid": "117440813461137764",
}


def test_content_is_the_body_escaped_as_html_paragraphs() -> None:
    html = entities.content_html(TWEET["body"])
    assert html == ("<p>&lt;script&gt;alert(1)&lt;/script&gt; &amp; more<br />line two</p><p>second paragraph</p>")
    assert entities.content_html("plain") == "<p>plain</p>"


def test_a_status_carries_every_list_and_ms_times() -> None:
    account = entities.account(PROFILE, "https://fan.example")
    status = entities.status(TWEET, account, "https://fan.example")
    assert status["id"] == "117440813461137764" and status["created_at"] == "2026-11-26T13:34:22.388Z"
    assert status["url"] == "https://fan.example/@Ann_1/117440813461137764"
    for name in ("media_attachments", "mentions", "tags", "emojis", "filtered"):
        assert status[name] == []
    assert status["visibility"] == "public" and status["account"] is account
    assert "text" not in status and "<script>" not in status["content"]
    deleted = entities.status(TWEET, account, "https://fan.example", source=True)
    assert deleted["text"] == TWEET["body"] and "content" not in deleted
    parsed = datetime.fromisoformat(status["created_at"].replace("Z", "+00:00"))
    assert parsed == datetime(2026, 11, 26, 13, 34, 22, 388000, tzinfo=UTC)


def test_an_account_has_real_image_urls_and_a_day_as_creation_time() -> None:
    account = entities.account(PROFILE, "http://127.0.0.1:8000")
    assert account["avatar"] == "http://127.0.0.1:8000/avatars/117440810532227399.png"
    assert account["header"].endswith("/headers/117440810532227399.png")
    assert account["created_at"] == "2026-11-26T00:00:00.000Z"
    assert account["acct"] == account["username"] == "Ann_1" and account["group"] is False
    assert account["statuses_count"] == 5 and account["last_status_at"] is None
    assert account["fields"] == account["emojis"] == account["roles"] == []
    me = entities.credential_account(PROFILE, "http://x")
    assert me["source"]["privacy"] == "public" and me["source"]["fields"] == []


# --- links ----------------------------------------------------------------------------


def _request(path: str, query: str) -> Request:
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": query.encode(),
        "headers": [(b"host", b"fan.example:8000")],
        "scheme": "http",
        "server": ("fan.example", 8000),
        "app": type("App", (), {"state": type("State", (), {"public_url": None})()})(),
    }
    return Request(scope)


def test_link_next_comes_first_and_keeps_other_parameters() -> None:
    headers = link(_request("/api/v1/timelines/public", "limit=5&local=true&max_id=9&min_id=1&access_token=s"), "100", "200")
    assert headers["Link"] == (
        '<http://fan.example:8000/api/v1/timelines/public?limit=5&local=true&max_id=100>; rel="next", '
        '<http://fan.example:8000/api/v1/timelines/public?limit=5&local=true&min_id=200>; rel="prev"'
    )
    assert link(_request("/x", ""), None, None) == {}


# --- errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "status", "text"),
    [
        (NotFound("no tweet x", code="tweet_not_found"), 404, "Record not found"),
        (Unauthorized("bad", code="unauthorized"), 401, "The access token is invalid"),
        (NotAUser("app token", code="unauthorized"), 422, "This method requires an authenticated user"),
        (InsufficientScope("nope"), 403, "This action is outside the authorized scopes"),
        (InvalidInput("visibility 'private' is not supported", code="unsupported"), 422, "visibility 'private' is not supported"),
        (Conflict("taken", code="username_taken"), 409, "taken"),
    ],
)
def test_errors_are_in_mastodon_shape(error: Exception, status: int, text: str) -> None:
    response = errors.mastodon_error(error)  # type: ignore[arg-type]
    assert response.status_code == status
    assert response.body == f'{{"error":"{text}"}}'.encode()


def test_oauth_errors_follow_rfc_6749() -> None:
    wrong = errors.oauth_error(Unauthorized("wrong secret", code="invalid_client"))
    assert wrong.status_code == 401 and b'"error":"invalid_client"' in wrong.body and b"error_description" in wrong.body
    scope = errors.oauth_error(scopes.InvalidScope("unknown scope"))
    assert scope.status_code == 400 and b'"invalid_scope"' in scope.body
    limited = errors.oauth_error(RateLimited("slow down", retry_after=7))
    assert limited.status_code == 429 and limited.headers["retry-after"] == "7"


def basic_request(authorization: str | None) -> Request:
    headers = [(b"authorization", authorization.encode())] if authorization else []
    return Request({"type": "http", "method": "POST", "path": "/oauth/token", "query_string": b"", "headers": headers})


def test_client_credentials_come_from_http_basic_else_from_the_body() -> None:
    """RFC 6749 2.3.1: Basic carries the form-encoded id and secret; without
    it the body's fields count; a malformed Basic header is invalid_client."""
    body = Params({"client_id": "body-id", "client_secret": "body-secret"})
    encoded = base64.b64encode(b"app%3Aid:s%20ecret").decode()
    assert oauth.client_credentials(basic_request(f"Basic {encoded}"), body) == {
        "client_id": "app:id",
        "client_secret": "s ecret",
    }
    assert oauth.client_credentials(basic_request(None), body) == {"client_id": "body-id", "client_secret": "body-secret"}
    assert oauth.client_credentials(basic_request("Bearer abc"), body)["client_id"] == "body-id"
    with pytest.raises(BadRequest) as malformed:
        oauth.client_credentials(basic_request("Basic %%%"), body)
    assert malformed.value.code == "invalid_client"


def test_mastodon_paths_get_all_three_x_ratelimit_headers() -> None:
    headers = Decision(True, 300, 299, 120).headers(mastodon=True)
    assert {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} <= set(headers)
    assert headers["X-RateLimit-Remaining"] == "299"
    reset = datetime.fromisoformat(headers["X-RateLimit-Reset"].replace("Z", "+00:00"))
    assert 100 < (reset - datetime.now(UTC)).total_seconds() <= 121
    assert "X-RateLimit-Limit" not in Decision(True, 300, 299, 120).headers()


# --- images ---------------------------------------------------------------------------


def _decode_png(data: bytes) -> tuple[int, int, bytes]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, width, height, idat = 8, 0, 0, b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, zlib.decompress(idat)


def test_avatars_are_valid_pngs_differing_per_account_and_stable() -> None:
    a, b = images.avatar_png("117440810532227399"), images.avatar_png("117440810532227400")
    width, height, pixels = _decode_png(a)
    assert width == height == 144 and len(pixels) == height * (1 + 3 * width)
    assert a != b and images.avatar_png("117440810532227399") == a
    hw, hh, _ = _decode_png(images.header_png("1"))
    assert (hw, hh) == (images.HEADER_W, images.HEADER_H)
