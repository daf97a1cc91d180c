"""The social-graph internal API (served by ``fanline_social_graph.app``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import NotFound
from ..http_client import PeerClient
from ..policies import PEER_REQUEST


class SocialGraphClient(PeerClient):
    """The social-graph internal API."""

    def __init__(
        self, service: str, base_url: str, timeout_s: float, *, token: str | None = None, background: bool = False
    ) -> None:
        super().__init__(service, "social-graph", base_url, timeout_s, token=token, background=background)

    async def create_user(self, username: str, password: str, email: str | None = None) -> dict[str, Any]:
        body = {"username": username, "password": password}
        if email is not None:
            body["email"] = email
        return await self.call("POST", "/internal/users", operation="create_user", json=body, policy=None)

    async def get_user(self, username: str) -> dict[str, Any]:
        return await self.call("GET", f"/internal/users/{username}", operation="get_user")

    async def get_users(self, usernames: Sequence[str]) -> list[dict[str, Any]]:
        body = await self.call("GET", "/internal/users", operation="get_users", params={"usernames": ",".join(usernames)})
        return list(body["items"])

    async def search_users(self, prefix: str, limit: int) -> list[dict[str, Any]]:
        body = await self.call("GET", "/internal/users", operation="search_users", params={"prefix": prefix, "limit": limit})
        return list(body["items"])

    async def login(self, username: str, password: str) -> dict[str, Any]:
        return await self.call(
            "POST", "/internal/sessions", operation="login", json={"username": username, "password": password}, policy=None
        )

    async def authenticate(self, token: str) -> str:
        """The username a token belongs to, or ``Unauthorized``."""
        return (await self.session(token))[0]

    async def session(self, token: str) -> tuple[str, str | None]:
        """The token's username and, if they came back from inactivity within
        the last day, when (RFC 3339), or ``Unauthorized``."""
        body = await self.grant(token)
        return str(body["username"]), body.get("returned_at")

    async def grant(self, token: str) -> dict[str, Any]:
        """The token's whole grant: ``username`` ("" for an app's own token),
        ``returned_at``, ``scopes``, ``client_id``, ``kind`` ("user" or
        "app"); or ``Unauthorized``."""
        body: dict[str, Any] = await self.call(
            "GET", "/internal/sessions/current", operation="authenticate", headers={"authorization": f"Bearer {token}"}
        )
        return body

    async def logout(self, token: str) -> None:
        await self.call("DELETE", "/internal/sessions/current", operation="logout", headers={"authorization": f"Bearer {token}"})

    async def follow(self, follower: str, followee: str) -> dict[str, Any]:
        return await self.call("PUT", f"/internal/users/{follower}/following/{followee}", operation="follow")

    async def unfollow(self, follower: str, followee: str) -> dict[str, Any]:
        return await self.call("DELETE", f"/internal/users/{follower}/following/{followee}", operation="unfollow")

    async def is_following(self, follower: str, followee: str) -> bool:
        body = await self.call("GET", f"/internal/users/{follower}/following/{followee}", operation="is_following")
        return bool(body["following"])

    async def reconcile_follow(self, follower: str, followee: str) -> bool:
        """Repair the pair's followers row from its edge (idempotent, so
        retried); True if ``follower`` follows ``followee``."""
        body = await self.call("POST", f"/internal/users/{follower}/following/{followee}/reconcile", operation="reconcile_follow")
        return bool(body["following"])

    async def edges(self, username: str, direction: str, limit: int, after: str | None) -> dict[str, Any]:
        """``direction`` is "following", "followers" or "followers-active"
        (followers who are active: the ones the fan-out writes to); returns
        items and next."""
        params: dict[str, Any] = {"limit": limit}
        if after:
            params["after"] = after
        return await self.call("GET", f"/internal/users/{username}/{direction}", operation=direction, params=params)

    # --- the Mastodon-compatible API (accounts by id, relationships, OAuth) ---------

    async def accounts(self, account_ids: Sequence[int]) -> list[dict[str, Any]]:
        """Profiles by account id, in the order asked; unknown ids left out."""
        if not account_ids:
            return []
        body = await self.call("GET", "/internal/accounts", operation="accounts", params={"ids": ",".join(map(str, account_ids))})
        return list(body["items"])

    async def user_by_email(self, email: str) -> dict[str, Any] | None:
        body = await self.call("GET", "/internal/users", operation="user_by_email", params={"email": email})
        items = body["items"]
        return dict(items[0]) if items else None

    async def relationships(self, actor: str, targets: Sequence[str]) -> list[dict[str, Any]]:
        """``{username, following, followed_by}`` of ``actor`` with each target."""
        body = await self.call(
            "POST", "/internal/relationships", operation="relationships", json={"actor": actor, "targets": list(targets)}
        )
        return list(body["items"])

    async def oauth(self, action: str, body: dict[str, Any], *, idempotent: bool = False) -> dict[str, Any]:
        """One OAuth call: ``action`` is "apps", "codes", "token",
        "user-token" or "revoke" (social-graph's oauth_routes.py)."""
        policy = PEER_REQUEST if idempotent else None
        answer = await self.call("POST", f"/internal/oauth/{action}", operation=f"oauth_{action}", json=body, policy=policy)
        return dict(answer or {})

    async def oauth_app(self, client_id: str) -> dict[str, Any]:
        return dict(await self.call("GET", f"/internal/oauth/apps/{client_id}", operation="oauth_app"))

    async def following_all(self, username: str, page_size: int = 1000) -> list[str]:
        """Every account ``username`` follows (all pages); [] for an unknown user."""
        names: list[str] = []
        after: str | None = None
        while True:
            try:
                page = await self.edges(username, "following", page_size, after)
            except NotFound:
                return []
            names.extend(item["username"] for item in page["items"])
            after = page.get("next")
            if not after:
                return names
