"""The transport of every internal call: ``PeerClient`` and the headers
services exchange.

A peer's error body is turned back into the same ``DomainError``; a peer that
does not answer becomes ``Unavailable``. Idempotent calls (GETs and the
idempotent writes) are retried per ``policies.PEER_REQUEST``. Each owner's
typed client is in ``fanline_shared.clients``.

The client is aiohttp rather than httpx: measured on this code's request
shape (20-tweet JSON page, uvicorn + httptools server, same process), a round
trip costs 0.30 ms of CPU with aiohttp against 1.33 ms with httpx, and every
post and timeline read makes two or three of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson

from . import metrics
from .errors import OVERLOADED_HEADER, Overloaded, Unavailable, from_status
from .internal_auth import CODE as INTERNAL_UNAUTHORIZED
from .internal_auth import auth_headers
from .logs import request_id_headers
from .policies import PEER_REQUEST, RetryPolicy, retry

log = logging.getLogger(__name__)


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
