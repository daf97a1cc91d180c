"""The gateway's use cases for accounts by id, statuses by id and OAuth —
what the Mastodon-compatible API needs beyond ``/v1``'s. ``Gateway``
inherits them (``gateway.py``), so both APIs share one service layer.

Status ids and account ids are opaque here: tweet-store and social-graph
own their encodings (``sids.py``, ``accounts.py``) and resolve them.
"""

from __future__ import annotations

from typing import Any

from fanline_shared import scopes as scope_rules
from fanline_shared.clients.social_graph import SocialGraphClient
from fanline_shared.clients.tweet_store import TweetStoreClient
from fanline_shared.domain import canonical, is_valid_username
from fanline_shared.errors import BadRequest, Forbidden, InvalidInput, NotFound, Unauthorized

from .accounts import AccountCache, Profile
from .principal import Principal
from .ratelimit import LoginGuard

# The grants /oauth/token serves (and the authorization server metadata lists).
GRANT_TYPES = ("authorization_code", "password", "client_credentials")


def _status_not_found(sid: str) -> NotFound:
    return NotFound(f"no status {sid[:32]}", code="tweet_not_found")


class AccountCases:
    social: SocialGraphClient
    tweets: TweetStoreClient
    logins: LoginGuard | None
    accounts: AccountCache
    registrations: bool

    def _publish(self, source: str, event_json: dict[str, Any]) -> None:
        raise NotImplementedError

    # --- accounts ------------------------------------------------------------------

    async def account_named(self, username: str, *, fresh: bool = False) -> Profile:
        profile = await self.accounts.one(username, fresh=fresh) if is_valid_username(username) else None
        if profile is None:
            raise NotFound(f"no user named '{username[:32]}'", code="user_not_found")
        return profile

    async def account_by_id(self, account_id: int, *, fresh: bool = False) -> Profile:
        profile = (await self.accounts.by_ids([account_id], fresh=fresh)).get(account_id)
        if profile is None:
            raise NotFound(f"no account {account_id}", code="user_not_found")
        return profile

    async def relationships(self, actor: str, account_ids: list[int]) -> list[tuple[str, bool, bool]]:
        """``(account id, following, followed_by)`` of ``actor`` with each
        known account, in the order asked."""
        profiles = await self.accounts.by_ids(account_ids)
        known = [(i, str(profiles[i]["username"])) for i in dict.fromkeys(account_ids) if i in profiles]
        answer = await self.social.relationships(actor, [name for _, name in known]) if known else []
        by_name = {canonical(str(r["username"])): r for r in answer}
        out = []
        for account_id, name in known:
            r = by_name.get(canonical(name), {})
            out.append((str(account_id), bool(r.get("following")), bool(r.get("followed_by"))))
        return out

    # --- statuses by id ----------------------------------------------------------------

    async def status(self, sid: str) -> dict[str, Any]:
        if not sid.isascii() or not sid.isdigit() or len(sid) > 19:
            raise _status_not_found(sid)
        return await self.tweets.get_status(sid)

    async def delete_status(self, actor: str, sid: str) -> dict[str, Any]:
        """Delete one of ``actor``'s statuses; the deleted tweet. Someone
        else's status is ``Forbidden`` (the Mastodon edge says 404, as
        Mastodon does)."""
        tweet = await self.status(sid)
        if canonical(str(tweet["username"])) != canonical(actor):
            raise Forbidden("you can only delete your own statuses", code="forbidden")
        result = await self.tweets.delete_status(sid, actor)
        self._publish("tweet-store", result["event"])
        return tweet

    # --- OAuth ------------------------------------------------------------------------

    async def register_app(self, name: object, redirect_uris: object, scopes: object, website: object) -> dict[str, Any]:
        body = {"name": name, "redirect_uris": redirect_uris, "scopes": scopes, "website": website}
        return await self.social.oauth("apps", body)

    async def app(self, client_id: str) -> dict[str, Any]:
        if not client_id or len(client_id) > 200 or not client_id.isascii() or "/" in client_id:
            raise NotFound("no such app", code="app_not_found")
        return await self.social.oauth_app(client_id)

    async def authorize(self, username: str, request: dict[str, Any]) -> str:
        """A code for ``username``'s approval of an app's request (the
        authorization page, signed in)."""
        body = {**{k: request.get(k) for k in ("client_id", "redirect_uri", "scope")}, "username": username}
        body["code_challenge"] = request.get("code_challenge")
        body["code_challenge_method"] = request.get("code_challenge_method")
        return str((await self.social.oauth("codes", body))["code"])

    async def token(self, fields: dict[str, Any], address: str = "unknown") -> dict[str, Any]:
        """``POST /oauth/token``: every grant of ``GRANT_TYPES``. The password
        grant passes the same failed-log-in limits as ``/v1/sessions`` —
        counted per user, also when the name given is their email."""
        grant = fields.get("grant_type")
        if grant not in GRANT_TYPES:
            raise BadRequest(f"grant_type must be one of {', '.join(GRANT_TYPES)}", code="unsupported_grant_type")
        if grant != "password":
            return await self.social.oauth("token", fields)
        identifier = fields.get("username")
        counted = await self._login_name(identifier)
        if self.logins is not None:
            await self.logins.check(counted, address)
        try:
            return await self.social.oauth("token", fields)
        except Unauthorized as exc:
            if exc.code == "invalid_client":
                raise
            if self.logins is not None:
                await self.logins.failed(counted, address)
            raise BadRequest("wrong username, email or password", code="invalid_grant") from None

    async def _login_name(self, identifier: object) -> object:
        """The username failed log-ins are counted under."""
        if isinstance(identifier, str) and "@" in identifier and len(identifier) <= 254:
            user = await self.social.user_by_email(identifier)
            return user["username"] if user is not None else identifier
        return identifier

    async def revoke(self, fields: dict[str, Any]) -> None:
        await self.social.oauth("revoke", fields)

    async def register_account(self, who: Principal, fields: dict[str, Any]) -> dict[str, Any]:
        """``POST /api/v1/accounts`` with an app's token: sign up (email
        optional) and return a token of that app for the new user."""
        who.require(scope_rules.WRITE_ACCOUNTS)
        if who.client_id is None:
            raise Forbidden("registering an account needs a token issued to an app", code="forbidden")
        if not fields.get("agreement"):
            error = InvalidInput("Validation failed: Agreement must be accepted", code="agreement_required")
            error.details = {"agreement": [{"error": "ERR_ACCEPTED", "description": "must be accepted"}]}  # type: ignore[attr-defined]
            raise error
        if not self.registrations:
            raise Forbidden("registrations are closed on this server", code="registrations_closed")
        await self.social.create_user(fields.get("username"), fields.get("password"), fields.get("email") or None)  # type: ignore[arg-type]
        body = {"client_id": who.client_id, "username": fields.get("username"), "scope": " ".join(who.scopes)}
        return await self.social.oauth("user-token", body)
