"""The tweet-store internal API (served by ``fanline_tweet_store.app``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..http_client import BACKGROUND, BULK, PRIORITY_HEADER, PeerClient
from ..policies import PEER_REQUEST


class TweetStoreClient(PeerClient):
    """The tweet-store internal API."""

    def __init__(
        self, service: str, base_url: str, timeout_s: float, *, token: str | None = None, background: bool = False
    ) -> None:
        super().__init__(service, "tweet-store", base_url, timeout_s, token=token, background=background)

    async def create_tweet(self, username: str, body: str, idempotency_key: str | None) -> dict[str, Any]:
        payload: dict[str, Any] = {"username": username, "body": body}
        if idempotency_key is not None:
            payload["idempotency_key"] = idempotency_key
        # Without a key a blind retry could post twice; with one it is safe.
        policy = PEER_REQUEST if idempotency_key is not None else None
        return await self.call("POST", "/internal/tweets", operation="create_tweet", json=payload, policy=policy)

    async def get_tweet(self, tweet_id: str) -> dict[str, Any]:
        return await self.call("GET", f"/internal/tweets/{tweet_id}", operation="get_tweet")

    async def check_tweet(self, tweet_id: str) -> dict[str, Any]:
        """``get_tweet`` for the fan-out worker: the same route and answer,
        marked as background work so that it does not count as a user-facing
        request (the fan-out would yield to itself at every event, see
        tweet-store's priority.py). A tweet-store that predates the mark
        ignores it: a rolling upgrade only loses speed, never answers."""
        return await self.call(
            "GET", f"/internal/tweets/{tweet_id}", operation="check_tweet", headers={PRIORITY_HEADER: BACKGROUND}
        )

    async def delete_tweet(self, tweet_id: str, actor: str) -> dict[str, Any]:
        return await self.call("DELETE", f"/internal/tweets/{tweet_id}", operation="delete_tweet", params={"actor": actor})

    async def timeline(
        self,
        kind: str,
        owner: str | None,
        limit: int,
        before: str | None,
        since: str | None = None,
        *,
        sids: Mapping[str, int] | None = None,
    ) -> dict[str, Any]:
        """``kind`` is "home", "user" or "public"; returns items (tweets) and
        next. ``since``: only tweets strictly newer than that id. ``sids``:
        bounds by status id instead (``max_sid``, ``since_sid``, ``min_sid``:
        Mastodon's max_id, since_id, min_id; tweet-store's sids.py)."""
        params: dict[str, Any] = {"limit": limit}
        if before:
            params["before"] = before
        if since:
            params["since"] = since
        for name, value in (sids or {}).items():
            params[name] = value
        path = {"home": f"/internal/home/{owner}", "user": f"/internal/userline/{owner}", "public": "/internal/public"}[kind]
        operation = f"timeline_{kind}"
        if self.offers(operation):  # hosted in this process: a plain call, the same answer
            return await self.direct(operation, path, owner, {k: str(v) for k, v in params.items()}, operation=operation)
        return await self.call("GET", path, operation=operation, params=params)

    async def get_status(self, sid: str) -> dict[str, Any]:
        """The tweet with this status id (404 for an id no minted tweet has)."""
        return await self.call("GET", f"/internal/statuses/{sid}", operation="get_status")

    async def delete_status(self, sid: str, actor: str) -> dict[str, Any]:
        return await self.call("DELETE", f"/internal/statuses/{sid}", operation="delete_status", params={"actor": actor})

    async def counts(self, usernames: Sequence[str]) -> dict[str, int]:
        body = await self.call("GET", "/internal/counts", operation="counts", params={"usernames": ",".join(usernames)})
        return {k: int(v) for k, v in body["counts"].items()}

    async def home_add(
        self, tweet_id: str, author: str, owners: Sequence[str], *, bulk: bool = False, check: bool = False
    ) -> None:
        """``bulk``: a slice of a large fan-out, written at the lowest priority.
        ``check``: tweet-store first checks that the tweet is stored and is
        ``author``'s, and writes nothing otherwise (``NotFound``, or
        ``Conflict`` with code ``author_mismatch``)."""
        body: dict[str, Any] = {"tweet_id": tweet_id, "author": author, "owners": list(owners)}
        if check:
            body["check"] = True
        await self.call(
            "POST",
            "/internal/home/add",
            operation="home_add",
            json=body,
            headers={PRIORITY_HEADER: BULK} if bulk else None,
        )

    async def home_remove(self, tweet_id: str, owners: Sequence[str]) -> None:
        await self.call(
            "POST", "/internal/home/remove", operation="home_remove", json={"tweet_id": tweet_id, "owners": list(owners)}
        )

    async def home_merge(self, owner: str, author: str) -> int:
        body = await self.call("POST", f"/internal/home/{owner}/merge", operation="home_merge", json={"author": author})
        return int(body["merged"])

    async def home_regeneration_done(self, owner: str, returned_at: str) -> bool:
        """Whether ``owner``'s home timeline was regenerated since they came
        back at ``returned_at`` (RFC 3339); tweet-store starts it if needed."""
        body = await self.call(
            "POST", f"/internal/home/{owner}/regeneration", operation="home_regeneration", json={"returned_at": returned_at}
        )
        return bool(body["done"])

    async def register_large_account(self, author: str) -> None:
        """Record ``author`` as large before one of their tweets skips the fan-out."""
        await self.call("POST", "/internal/large-accounts", operation="register_large_account", json={"author": author})

    async def home_purge(self, owner: str, author: str) -> int:
        body = await self.call("POST", f"/internal/home/{owner}/purge", operation="home_purge", json={"author": author})
        return int(body["removed"])
