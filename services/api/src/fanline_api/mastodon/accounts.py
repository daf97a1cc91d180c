"""Mastodon's accounts: who am I, look-up by name or id, follow and unfollow
(answering a Relationship), relationships, followers and following (paged by
``Link``), search by name, and registration with an app's token."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from fanline_shared import scopes as scope_rules
from fanline_shared.domain import canonical, is_valid_username
from fanline_shared.errors import Conflict, InvalidInput, NotFound
from fanline_shared.http_routes import json_response

from . import entities
from .context import anyone, base, gw, link, optional, user
from .params import ACCOUNTS_LIMIT, Params, limit, path_id, read_params, status_id

SEARCH_LIMIT = 20


async def verify_credentials(request: Request) -> Response:
    who = await user(request, scope_rules.READ_ACCOUNTS)
    profile = await gw(request).account_named(who.username, fresh=True)
    return json_response(entities.credential_account(profile, base(request)))


async def show(request: Request) -> Response:
    await optional(request, scope_rules.READ_ACCOUNTS)
    profile = await gw(request).account_by_id(path_id(request), fresh=True)
    return json_response(entities.account(profile, base(request)))


async def show_many(request: Request) -> Response:
    """``GET /api/v1/accounts?id[]=…``: those that exist, in the order asked."""
    await optional(request, scope_rules.READ_ACCOUNTS)
    params = await read_params(request)
    ids = [status_id(i, "id") or 0 for i in params.list("id")[:40]]
    profiles = await gw(request).accounts.by_ids(ids)
    url = base(request)
    return json_response([entities.account(profiles[i], url) for i in dict.fromkeys(ids) if i in profiles])


def local_name(request: Request, acct: str | None) -> str | None:
    """``user``, ``@user`` or ``user@<this server>`` -> ``user``; else None."""
    if not acct:
        return None
    name, _, domain = acct.strip().lstrip("@").partition("@")
    host = base(request).split("://", 1)[-1].split("/", 1)[0]
    if domain and domain.lower() not in (host.lower(), host.split(":")[0].lower()):
        return None
    return name if is_valid_username(name) else None


async def lookup(request: Request) -> Response:
    await optional(request, scope_rules.READ_ACCOUNTS)
    params = await read_params(request)
    name = local_name(request, params.text("acct"))
    if name is None:
        raise NotFound("no such account", code="user_not_found")
    profile = await gw(request).account_named(name)
    return json_response(entities.account(profile, base(request)))


async def _relationship(request: Request, actor: str, account_id: int) -> dict[str, Any]:
    [(rid, following, followed_by)] = await gw(request).relationships(actor, [account_id])
    return entities.relationship(rid, following, followed_by)


def change_follow(follow: bool):  # type: ignore[no-untyped-def]
    async def handler(request: Request) -> Response:
        who = await user(request, scope_rules.WRITE_FOLLOWS)
        await read_params(request)  # reblogs, notify, languages: accepted, nothing to set
        g = gw(request)
        account_id = path_id(request)
        target = await g.account_by_id(account_id)
        await g.follow(who.username, who.username, str(target["username"]), follow=follow)
        return json_response(await _relationship(request, who.username, account_id))

    return handler


async def relationships(request: Request) -> Response:
    who = await user(request, scope_rules.READ_FOLLOWS)
    params = await read_params(request)
    ids = [status_id(i, "id") or 0 for i in params.list("id")[:100]]
    answer = await gw(request).relationships(who.username, ids)
    return json_response([entities.relationship(*r) for r in answer])


def edges(direction: str):  # type: ignore[no-untyped-def]
    """Followers or following, by name; the next page starts after the
    account whose id is ``max_id`` (the ``Link`` carries it)."""

    async def handler(request: Request) -> Response:
        await optional(request, scope_rules.READ_ACCOUNTS)
        params = await read_params(request)
        g = gw(request)
        profile = await g.account_by_id(path_id(request))
        after = await _after(request, params)
        page = await g.social.edges(str(profile["username"]), direction, limit(params, ACCOUNTS_LIMIT), after)
        names = [str(item["username"]) for item in page["items"]]
        profiles = await g.accounts.many(names)
        url = base(request)
        items = [entities.account(profiles[canonical(n)], url) for n in names if canonical(n) in profiles]
        headers = link(request, items[-1]["id"], None) if items and page.get("next") else {}
        return json_response(items, headers=headers)

    return handler


async def _after(request: Request, params: Params) -> str | None:
    """The name a ``max_id`` (an account id) continues after."""
    max_id = status_id(params.get("max_id"), "max_id")
    if max_id is None:
        return None
    try:
        return canonical(str((await gw(request).account_by_id(max_id))["username"]))
    except NotFound:
        return None


async def search_accounts(request: Request, params: Params) -> list[dict[str, Any]]:
    """Accounts whose name is, or starts with, the query (``@name`` and
    ``name@<this server>`` too): the exact match first."""
    query = (params.text("q") or "").strip()
    name = local_name(request, query)
    count = limit(params, SEARCH_LIMIT)
    offset = status_id(params.get("offset"), "offset") or 0
    if name is None or offset >= 100:
        return []
    found = await gw(request).search(name, min(offset + count, 100))
    found.sort(key=lambda p: canonical(str(p["username"])) != canonical(name))  # stable: the exact match first
    url = base(request)
    return [entities.account(p, url) for p in found[offset : offset + count]]


async def search_v2(request: Request) -> Response:
    await optional(request, scope_rules.READ_SEARCH)
    params = await read_params(request)
    kind = params.text("type")
    accounts = await search_accounts(request, params) if kind in (None, "", "accounts") else []
    return json_response({"accounts": accounts, "statuses": [], "hashtags": []})


async def search_v1(request: Request) -> Response:
    """``GET /api/v1/accounts/search``: the accounts part of the search."""
    await optional(request, scope_rules.READ_ACCOUNTS)
    return json_response(await search_accounts(request, await read_params(request)))


async def register(request: Request) -> Response:
    """``POST /api/v1/accounts``: sign up with an app's token (``write:accounts``);
    username, password, ``agreement``; email optional. A token for the new user."""
    who = await anyone(request)
    params = await read_params(request)
    fields = {
        "username": params.text("username"),
        "password": params.text("password"),
        "email": params.text("email"),
        "agreement": params.flag("agreement"),
    }
    try:
        token = await gw(request).register_account(who, fields)
    except Conflict as exc:
        field = "email" if exc.code == "email_taken" else "username"
        raise _validation(field, "ERR_TAKEN", "has already been taken") from None
    except InvalidInput as exc:
        if exc.code not in ("invalid_username", "invalid_password", "invalid_email"):
            raise
        raise _validation(exc.code.removeprefix("invalid_"), "ERR_INVALID", exc.message) from None
    return json_response(token)


def _validation(field: str, error: str, description: str) -> InvalidInput:
    exc = InvalidInput(f"Validation failed: {field.capitalize()} {description}", code=f"invalid_{field}")
    exc.details = {field: [{"error": error, "description": description}]}  # type: ignore[attr-defined]
    return exc


async def familiar_followers(request: Request) -> Response:
    await user(request, scope_rules.READ_FOLLOWS)
    params = await read_params(request)
    return json_response([{"id": str(i), "accounts": []} for i in params.list("id")[:40]])


async def update_credentials(request: Request) -> Response:
    await user(request, scope_rules.WRITE_ACCOUNTS)
    raise InvalidInput("editing a profile is not supported by this server (Fanline)", code="unsupported")
