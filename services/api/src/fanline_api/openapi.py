"""The OpenAPI 3.1 document served at ``/openapi.json``.

Written out by hand from api.md (the routes are few and the contract is
prose-first); ``tests/unit/test_openapi.py`` checks that every route the
gateway serves is described and vice versa.
"""

from __future__ import annotations

from typing import Any

from fanline_shared.domain import BODY_MAX, LIMIT_DEFAULT, LIMIT_MAX, PASSWORD_MAX, PASSWORD_MIN

TIME = {"type": "string", "format": "date-time", "examples": ["2026-11-22T10:15:30.123456Z"]}
USERNAME = {"type": "string", "pattern": "^[A-Za-z0-9_]{1,15}$"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


def _errors(*statuses: int) -> dict[str, Any]:
    text = {
        400: "Malformed JSON or cursor",
        401: "Missing, malformed, expired or revoked token",
        403: "Acting on someone else's resource",
        404: "Unknown user or tweet",
        409: "Username already taken",
        413: "Body over 64 KiB",
        422: "Breaks a validation rule",
        429: "Rate limited (Retry-After set)",
        503: "A dependency is unavailable (Retry-After set)",
    }
    out = {str(s): _error(text[s]) for s in statuses}
    out.setdefault("503", _error(text[503]))
    return out


def _header(description: str, required: bool = False) -> dict[str, Any]:
    return {"description": description, "required": required, "schema": {"type": "integer", "minimum": 0}}


# api.md "Rate limits": on by default, so any limited operation may answer
# 429; the RateLimit-* headers come with every response while limits are on
# (FANLINE_RATE_LIMITS, the default), hence documented but not required.
LIMIT_HEADERS = {
    "RateLimit-Limit": _header("Requests allowed in the current window"),
    "RateLimit-Remaining": _header("Requests left in the current window"),
    "RateLimit-Reset": _header("Seconds until the window frees capacity"),
}
RETRY_AFTER = {"Retry-After": _header("Seconds to wait before retrying", required=True)}


def _add_limit_headers(paths: dict[str, Any]) -> None:
    """Every /v1 operation: may be rate limited (429) or find a dependency
    down (503, both with Retry-After); every response documents the
    RateLimit-* headers."""
    for path, item in paths.items():
        if not path.startswith("/v1/"):
            continue
        for op in item.values():
            responses = op["responses"]
            responses.setdefault("429", _error("Rate limited"))
            responses.setdefault("503", _error("A dependency is unavailable"))
            for status, response in responses.items():
                extra = RETRY_AFTER if status in ("429", "503") else {}
                response["headers"] = {**LIMIT_HEADERS, **extra}


PATH_USERNAME = {"name": "username", "in": "path", "required": True, "schema": USERNAME}
PATH_TARGET = {"name": "target", "in": "path", "required": True, "schema": USERNAME}
PATH_TWEET = {
    "name": "tweet_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "format": "uuid"},
    "description": "Version-1 UUID",
}
LIMIT = {
    "name": "limit",
    "in": "query",
    "required": False,
    "schema": {"type": "integer", "minimum": 1, "maximum": LIMIT_MAX, "default": LIMIT_DEFAULT},
}
# Never empty: the server produces none, and "cursor=" is refused (400).
CURSOR = {
    "name": "cursor",
    "in": "query",
    "required": False,
    "schema": {"type": "string", "minLength": 1},
    "description": "The previous page's next_cursor, unchanged",
}
# A tweet id is a version-1 (time-based) UUID; any other UUID is 422 invalid_since_id.
TWEET_ID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-1[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
# Last-Event-ID: a tweet id in either case, or empty (the server's rules,
# streaming.last_event_id). The SSE standard's "last event ID" starts empty
# and a client may send it so; the stream then starts live, not resuming.
LAST_EVENT_ID_PATTERN = r"^$|^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-1[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$"
SINCE_ID = {
    "name": "since_id",
    "in": "query",
    "required": False,
    "schema": {"type": "string", "pattern": TWEET_ID_PATTERN},
    "description": "Only tweets strictly newer than this tweet id; next_cursor never pages past it "
    "(malformed: 422 invalid_since_id)",
}
# At least one character that str.strip() keeps, and no NUL: the rules of
# domain.validate_body that a schema can state (the 280-code-point bound is
# on the trimmed text, so it is in the description only).
BODY_PATTERN = r"^[^\u0000]*[^\s\u0000][^\u0000]*$"
AUTH: list[dict[str, list[str]]] = [{"bearer": []}]


def _timeline(summary: str, params: list[dict[str, Any]], auth: bool, extra: tuple[int, ...] = ()) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "parameters": [*params, LIMIT, CURSOR, SINCE_ID],
        "responses": {"200": _json(_ref("TweetPage"), "A page, newest first"), **_errors(400, 422, *extra)},
    }
    if auth:
        op["security"] = AUTH
    return {"get": op}


def _stream(summary: str, auth: bool) -> dict[str, Any]:
    """A text/event-stream route (api.md "Live updates"); events described in prose."""
    op: dict[str, Any] = {
        "summary": summary,
        "description": (
            "`event: update` (`id`: tweet id, `data`: Tweet JSON), `event: delete` "
            '(`data`: {"id": tweet id}), a comment line at least every 15 s. '
            "Last-Event-ID resumes: newer items first (oldest first), then live."
        ),
        "parameters": [
            {
                "name": "Last-Event-ID",
                "in": "header",
                "required": False,
                "schema": {"type": "string", "pattern": LAST_EVENT_ID_PATTERN},
                "description": "Resume after this tweet id; empty means not resuming (an event stream's "
                "last event id is empty until it got one)",
            }
        ],
        "responses": {
            "200": {"description": "An endless event stream", "content": {"text/event-stream": {"schema": {"type": "string"}}}},
            **_errors(*((401, 403, 422, 429) if auth else (422,))),
        },
    }
    if auth:
        op["security"] = AUTH
        op["description"] += " The web pages' session cookie is accepted too; at most 4 streams per user (429)."
    return {"get": op}


def openapi_document(version: str) -> dict[str, Any]:
    schemas: dict[str, Any] = {
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["code", "message"],
                    "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                }
            },
        },
        "User": {
            "type": "object",
            "required": ["username", "created_at", "followers_count", "following_count", "tweets_count"],
            "properties": {
                "username": USERNAME,
                "created_at": TIME,
                "followers_count": {"type": "integer"},
                "following_count": {"type": "integer"},
                "tweets_count": {"type": "integer"},
            },
        },
        "UserList": {"type": "object", "required": ["items"], "properties": {"items": {"type": "array", "items": _ref("User")}}},
        "Credentials": {
            "type": "object",
            "required": ["username", "password"],
            "properties": {
                "username": USERNAME,
                "password": {"type": "string", "minLength": PASSWORD_MIN, "maxLength": PASSWORD_MAX},
            },
        },
        "Session": {
            "type": "object",
            "required": ["token", "username", "expires_at"],
            "properties": {"token": {"type": "string"}, "username": USERNAME, "expires_at": TIME},
        },
        "Edge": {"type": "object", "required": ["username", "since"], "properties": {"username": USERNAME, "since": TIME}},
        "EdgePage": {
            "type": "object",
            "required": ["items", "next_cursor"],
            "properties": {"items": {"type": "array", "items": _ref("Edge")}, "next_cursor": {"type": ["string", "null"]}},
        },
        "NewTweet": {
            "type": "object",
            "required": ["body"],
            "properties": {
                "body": {
                    "type": "string",
                    "minLength": 1,
                    "pattern": BODY_PATTERN,
                    "description": f"1-{BODY_MAX} code points after trimming surrounding white space",
                }
            },
        },
        "Tweet": {
            "type": "object",
            "required": ["id", "username", "body", "created_at"],
            "properties": {
                "id": {"type": "string", "format": "uuid"},
                "username": USERNAME,
                "body": {"type": "string"},
                "created_at": TIME,
            },
        },
        "TweetPage": {
            "type": "object",
            "required": ["items", "next_cursor"],
            "properties": {"items": {"type": "array", "items": _ref("Tweet")}, "next_cursor": {"type": ["string", "null"]}},
        },
    }
    ops_ok = {"200": {"description": "OK"}}
    paths: dict[str, Any] = {
        "/v1/users": {
            "post": {
                "summary": "Sign up",
                "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("Credentials")}}},
                "responses": {"201": _json(_ref("User"), "Created"), **_errors(400, 403, 409, 413, 422, 429)},
            },
            "get": {
                "summary": "Look up users by name (in the order asked) or by prefix",
                "parameters": [
                    {
                        "name": "usernames",
                        "in": "query",
                        "schema": {"type": "string"},
                        "description": "Comma-separated, at most 100",
                    },
                    {
                        "name": "prefix",
                        "in": "query",
                        "schema": {"type": "string"},
                        "description": "Find users whose name starts with this (extension)",
                    },
                    LIMIT,
                ],
                "responses": {"200": _json(_ref("UserList"), "Found users"), **_errors(422)},
            },
        },
        "/v1/users/{username}": {
            "get": {
                "summary": "A user",
                "parameters": [PATH_USERNAME],
                "responses": {"200": _json(_ref("User"), "The user"), **_errors(404)},
            }
        },
        "/v1/users/{username}/following": {
            "get": {
                "summary": "Accounts this user follows",
                "parameters": [PATH_USERNAME, LIMIT, CURSOR],
                "responses": {"200": _json(_ref("EdgePage"), "A page"), **_errors(400, 404, 422)},
            }
        },
        "/v1/users/{username}/followers": {
            "get": {
                "summary": "Accounts following this user",
                "parameters": [PATH_USERNAME, LIMIT, CURSOR],
                "responses": {"200": _json(_ref("EdgePage"), "A page"), **_errors(400, 404, 422)},
            }
        },
        "/v1/users/{username}/following/{target}": {
            "put": {
                "summary": "Follow (idempotent)",
                "security": AUTH,
                "parameters": [PATH_USERNAME, PATH_TARGET],
                "responses": {"204": {"description": "Following"}, **_errors(401, 403, 404, 422)},
            },
            "delete": {
                "summary": "Unfollow (idempotent)",
                "security": AUTH,
                "parameters": [PATH_USERNAME, PATH_TARGET],
                "responses": {"204": {"description": "Not following"}, **_errors(401, 403, 404, 422)},
            },
        },
        "/v1/users/{username}/tweets": _timeline("The user's tweets (userline)", [PATH_USERNAME], False, (404,)),
        "/v1/sessions": {
            "post": {
                "summary": "Log in",
                "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("Credentials")}}},
                "responses": {"200": _json(_ref("Session"), "A session token"), **_errors(400, 401, 413, 429)},
            }
        },
        "/v1/sessions/current": {
            "delete": {
                "summary": "Log out (revoke the token)",
                "security": AUTH,
                "responses": {"204": {"description": "Revoked"}, **_errors(401)},
            }
        },
        "/v1/tweets": {
            "post": {
                "summary": "Post a tweet",
                "security": AUTH,
                "parameters": [
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "required": False,
                        "schema": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": 64,
                            # printable ASCII; no edge spaces (HTTP strips them)
                            "pattern": "^[!-~]([ -~]*[!-~])?$",
                        },
                        "description": "Repeats within 24 h return the first tweet",
                    }
                ],
                "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("NewTweet")}}},
                "responses": {
                    "201": _json(_ref("Tweet"), "Created"),
                    "200": _json(_ref("Tweet"), "Repeat of an Idempotency-Key: the first tweet"),
                    # 404: a repeated Idempotency-Key whose tweet was deleted.
                    # 403: the token's scopes do not admit posting.
                    **_errors(400, 401, 403, 404, 413, 422, 429),
                },
            }
        },
        "/v1/tweets/{tweet_id}": {
            "get": {
                "summary": "A tweet",
                "parameters": [PATH_TWEET],
                "responses": {"200": _json(_ref("Tweet"), "The tweet"), **_errors(404)},
            },
            "delete": {
                "summary": "Delete your tweet",
                "security": AUTH,
                "parameters": [PATH_TWEET],
                "responses": {"204": {"description": "Deleted"}, **_errors(401, 403, 404)},
            },
        },
        "/v1/timeline": _timeline("Your home timeline", [], True, (401, 403)),
        "/v1/public": _timeline("The public timeline", [], False),
        "/v1/streaming/home": _stream("Live updates of your home timeline (server-sent events)", True),
        "/v1/streaming/public": _stream("Live updates of the public timeline (server-sent events)", False),
        "/healthz": {"get": {"summary": "Liveness", "responses": ops_ok}},
        "/readyz": {
            "get": {
                "summary": "Readiness (dependencies named when failing)",
                "responses": {"200": {"description": "Ready"}, "503": _error("Not ready")},
            }
        },
        "/openapi.json": {"get": {"summary": "This document", "responses": ops_ok}},
    }
    _add_limit_headers(paths)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Fanline API",
            "version": version,
            "description": "Twitter-style timelines on Cassandra and Kafka. See api.md.",
        },
        "servers": [{"url": "http://127.0.0.1:8000"}],
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
