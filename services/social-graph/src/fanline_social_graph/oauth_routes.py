"""social-graph's internal OAuth routes (``oauth.py``), called by the
gateway's ``/api/v1/apps``, ``/oauth/*`` and authorization page only."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from fanline_shared.errors import BadRequest
from fanline_shared.http_routes import json_response, read_json_object, route

from .oauth import ClientCredentials, OAuth, app_json


def _oauth(request: Request) -> OAuth:
    return request.app.state.oauth  # type: ignore[no-any-return]


def _text(body: dict[str, object], name: str) -> str:
    value = body.get(name)
    return value if isinstance(value, str) else ""


def _optional(body: dict[str, object], name: str) -> str | None:
    value = body.get(name)
    return value if isinstance(value, str) and value else None


def _client(body: dict[str, object]) -> ClientCredentials:
    return ClientCredentials(_text(body, "client_id"), _text(body, "client_secret"))


async def create_app(request: Request) -> Response:
    body = await read_json_object(request)
    app = await _oauth(request).register_app(body.get("name"), body.get("redirect_uris"), body.get("scopes"), body.get("website"))
    return json_response(app, 201)


async def get_app(request: Request) -> Response:
    return json_response(app_json(await _oauth(request).app(request.path_params["client_id"])))


async def create_code(request: Request) -> Response:
    body = await read_json_object(request)
    code = await _oauth(request).authorize(
        _text(body, "client_id"),
        _text(body, "username"),
        _text(body, "redirect_uri"),
        body.get("scope"),
        _optional(body, "code_challenge"),
        _optional(body, "code_challenge_method"),
    )
    return json_response({"code": code}, 201)


async def token(request: Request) -> Response:
    body = await read_json_object(request)
    oauth, client, grant = _oauth(request), _client(body), _text(body, "grant_type")
    if grant == "authorization_code":
        answer = await oauth.exchange_code(
            client, _text(body, "code"), _text(body, "redirect_uri"), _optional(body, "code_verifier")
        )
    elif grant == "client_credentials":
        answer = await oauth.client_token(client, body.get("scope"))
    elif grant == "password":
        answer = await oauth.password_token(client, body.get("username"), body.get("password"), body.get("scope"))
    else:
        raise BadRequest(f"grant_type {grant[:40]!r} is not supported", code="unsupported_grant_type")
    return json_response(answer)


async def user_token(request: Request) -> Response:
    body = await read_json_object(request)
    return json_response(await _oauth(request).user_token(_text(body, "client_id"), _text(body, "username"), body.get("scope")))


async def revoke(request: Request) -> Response:
    body = await read_json_object(request)
    await _oauth(request).revoke(_client(body), _text(body, "token"))
    return Response(status_code=204)


def oauth_routes(service: str) -> list[Route]:
    return [
        route(service, "/internal/oauth/apps", create_app, ["POST"]),
        route(service, "/internal/oauth/apps/{client_id}", get_app, ["GET"]),
        route(service, "/internal/oauth/codes", create_code, ["POST"]),
        route(service, "/internal/oauth/token", token, ["POST"]),
        route(service, "/internal/oauth/user-token", user_token, ["POST"]),
        route(service, "/internal/oauth/revoke", revoke, ["POST"]),
    ]
