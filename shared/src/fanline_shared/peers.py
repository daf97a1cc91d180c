"""Typed HTTP clients for the internal APIs of social-graph and tweet-store.

The gateway and the fan-out worker use these; nobody reads another service's
tables. A peer's error body is turned back into the same ``DomainError``; a
peer that does not answer becomes ``Unavailable``. Idempotent calls (GETs and
the idempotent writes) are retried per ``policies.PEER_REQUEST``.

The client is aiohttp rather than httpx: measured on this code's request
shape (20-tweet JSON page, uvicorn + httptools server, same process), a round
trip costs 0.30 ms of CPU with aiohttp against 1.33 ms with httpx, and every
post and timeline read makes two or three of them.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import orjson

from . import metrics
from .domain import OutboxEvent
from .errors import OVERLOADED_HEADER, DomainError, NotFound, Overloaded, Unavailable, from_status
from .internal_auth import CODE as INTERNAL_UNAUTHORIZED
from .internal_auth import auth_headers
from .logs import request_id_headers, valid_request_id
from .policies import PEER_REQUEST, RetryPolicy, retry

log = logging.getLogger(__name__)


def event_to_json(event: OutboxEvent) -> dict[str, Any]:
    data = {"id": str(event.id), "key": event.key, "payload": event.payload.decode()}
    if event.request_id:
        data["request_id"] = event.request_id
    return data


def event_from_json(data: dict[str, Any]) -> OutboxEvent:
    return OutboxEvent(
        id=uuid.UUID(data["id"]),
        key=data["key"],
        payload=data["payload"].encode(),
        request_id=valid_request_id(data.get("request_id")),
    )


# Sent by background callers (the fan-out worker) on requests that a service
# would otherwise treat as user-facing; see tweet-store's priority.py.
PRIORITY_HEADER = "x-fanline-priority"
BACKGROUND = "background"  # the header's value for background work
# Home rows of a large fan-out's slices: written after every other fan-out
# write waiting at tweet-store (its limiter.py), so one author's million rows
# never delay another author's thousand.
BULK = "bulk"
# How long the caller waits for this request (milliseconds), sent on every
# peer request. A service doing long background work for it (tweet-store's
# fan-out pages) stops short of it and answers 503: work the caller has given
# up on would otherwise queue behind itself while the caller retries it
# (``caller_budget_s``).
TIMEOUT_HEADER = "x-fanline-timeout-ms"
# Of the caller's timeout, the share a service may spend before answering.
CALLER_BUDGET_SHARE = 0.8


def caller_budget_s(headers: Mapping[str, str], *, default_s: float) -> float:
    """Seconds a service may work on a peer's request: ``CALLER_BUDGET_SHARE``
    of the timeout the caller sent (``TIMEOUT_HEADER``), else ``default_s``;
    never more than ``default_s``, never less than 0.1 s."""
    raw = headers.get(TIMEOUT_HEADER, "")
    try:
        sent = int(raw) / 1000 * CALLER_BUDGET_SHARE if raw else default_s
    except ValueError:
        sent = default_s
    return max(0.1, min(sent, default_s))


class PeerClient:
    """One peer service reached over HTTP (keep-alive pooled). ``token``: the
    service credential (``FANLINE_INTERNAL_TOKEN``) sent on every request.
    ``background``: every request is background work (the fan-out worker's),
    marked with ``PRIORITY_HEADER`` so the peer neither counts it against its
    admission limit (``admission.py``) nor yields its own background work to it."""

    def __init__(
        self, service: str, peer: str, base_url: str, timeout_s: float, *, token: str | None = None, background: bool = False
    ) -> None:
        self._service = service
        self._peer = peer
        self._auth = auth_headers(token)
        if background:
            self._auth[PRIORITY_HEADER] = BACKGROUND
        self._base_url = base_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._timeout_ms = str(int(timeout_s * 1000))
        # Created on first use: an aiohttp session belongs to the running loop.
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout,
                # Idle connections close after 15 s, well before the servers'
                # 75 s keep-alive: the client always closes first, so a request
                # never goes out on a connection the server is closing.
                connector=aiohttp.TCPConnector(limit=200, keepalive_timeout=15),
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def call(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        json: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        policy: RetryPolicy | None = PEER_REQUEST,
    ) -> Any:
        """Send one request; return the decoded JSON (None for 204).

        ``policy=None`` sends once (for writes that are not idempotent)."""
        url = self._base_url + path
        query = {k: str(v) for k, v in params.items()} if params else None

        async def once() -> Any:
            started = time.perf_counter()
            content = orjson.dumps(json) if json is not None else None
            req_headers = {"content-type": "application/json"} if content is not None else {}
            req_headers.update(self._auth)
            req_headers.update(request_id_headers())  # the request (or event) this call serves
            req_headers[TIMEOUT_HEADER] = self._timeout_ms
            if headers:
                req_headers.update(headers)
            try:
                async with self._http().request(
                    method, url, data=content, params=query, headers=req_headers, allow_redirects=False
                ) as response:
                    status = response.status
                    raw = await response.read()
                    shed_by = response.headers.get(OVERLOADED_HEADER)
                    retry_after = response.headers.get("Retry-After", "")
            except (aiohttp.ClientError, TimeoutError) as exc:
                metrics.PEER_ERRORS.labels(self._service, self._peer, operation).inc()
                raise Unavailable(f"{self._peer} unavailable ({type(exc).__name__})") from None
            finally:
                metrics.PEER_LATENCY.labels(self._service, self._peer, operation).observe(time.perf_counter() - started)
            if status == 204:
                return None
            try:
                body = orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                body = None
            if status == 503 and shed_by is not None:
                # The peer's admission control refused it before any work.
                metrics.PEER_ERRORS.labels(self._service, self._peer, operation).inc()
                raise Overloaded(
                    f"{self._peer} is over its capacity; retry later",
                    retry_after=int(retry_after) if retry_after.isdigit() else 1,
                )
            if status >= 400:
                if status >= 500:
                    metrics.PEER_ERRORS.labels(self._service, self._peer, operation).inc()
                err = (body or {}).get("error", {}) if isinstance(body, dict) else {}
                if status == 401 and err.get("code") == INTERNAL_UNAUTHORIZED:
                    # Our credential, not the user's: a deployment error,
                    # shown as 503 (the worker waits), never as the user's 401.
                    metrics.PEER_ERRORS.labels(self._service, self._peer, operation).inc()
                    log.error(
                        "%s refused %s's service credential: set the same FANLINE_INTERNAL_TOKEN on every service",
                        self._peer,
                        self._service,
                    )
                    raise Unavailable(f"{self._peer} unavailable (service credential refused)")
                raise from_status(
                    status,
                    str(err.get("code", "error")),
                    str(err.get("message", f"{self._peer} answered {status}")),
                )
            return body

        if policy is None:
            return await once()
        return await retry(policy, once)


class SocialGraphClient(PeerClient):
    """The social-graph internal API."""

    def __init__(
        self, service: str, base_url: str, timeout_s: float, *, token: str | None = None, background: bool = False
    ) -> None:
        super().__init__(service, "social-graph", base_url, timeout_s, token=token, background=background)

    async def create_user(self, username: str, password: str) -> dict[str, Any]:
        return await self.call(
            "POST", "/internal/users", operation="create_user", json={"username": username, "password": password}, policy=None
        )

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
        body = await self.call(
            "GET", "/internal/sessions/current", operation="authenticate", headers={"authorization": f"Bearer {token}"}
        )
        return str(body["username"]), body.get("returned_at")

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
        self, kind: str, owner: str | None, limit: int, before: str | None, since: str | None = None
    ) -> dict[str, Any]:
        """``kind`` is "home", "user" or "public"; returns items (tweets) and
        next. ``since``: only tweets strictly newer than that id."""
        params: dict[str, Any] = {"limit": limit}
        if before:
            params["before"] = before
        if since:
            params["since"] = since
        path = {"home": f"/internal/home/{owner}", "user": f"/internal/userline/{owner}", "public": "/internal/public"}[kind]
        return await self.call("GET", path, operation=f"timeline_{kind}", params=params)

    async def counts(self, usernames: Sequence[str]) -> dict[str, int]:
        body = await self.call("GET", "/internal/counts", operation="counts", params={"usernames": ",".join(usernames)})
        return {k: int(v) for k, v in body["counts"].items()}

    async def home_add(self, tweet_id: str, author: str, owners: Sequence[str], *, bulk: bool = False) -> None:
        """``bulk``: a slice of a large fan-out, written at the lowest priority."""
        await self.call(
            "POST",
            "/internal/home/add",
            operation="home_add",
            json={"tweet_id": tweet_id, "author": author, "owners": list(owners)},
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


async def outbox_pending(client: PeerClient, older_than_ms: int, limit: int) -> list[OutboxEvent]:
    body = await client.call(
        "GET", "/internal/outbox", operation="outbox_pending", params={"older_than_ms": older_than_ms, "limit": limit}
    )
    return [event_from_json(item) for item in body["items"]]


async def outbox_ack(client: PeerClient, ids: Sequence[uuid.UUID]) -> None:
    await client.call("POST", "/internal/outbox/ack", operation="outbox_ack", json={"ids": [str(i) for i in ids]})


__all__ = [
    "DomainError",
    "PeerClient",
    "SocialGraphClient",
    "TweetStoreClient",
    "event_from_json",
    "event_to_json",
    "outbox_ack",
    "outbox_pending",
]
