"""The transport of every internal call: ``PeerClient`` and the headers
services exchange.

A peer's error body is turned back into the same ``DomainError``; a peer that
does not answer becomes ``Unavailable``. Idempotent calls (GETs and the
idempotent writes) are retried per ``policies.PEER_REQUEST``. Each owner's
typed client is in ``fanline_shared.clients``.

The transport is ``http_local`` when this process hosts the peer
(``colocation.py``: the gateway with the storage services in one process),
else ``http_pool`` (httptools-parsed keep-alive connections):
measured on this code's request shape (20-tweet JSON page, uvicorn +
httptools server), a call costs 40-60 µs of client CPU against 150-190 µs
with aiohttp and 1,330 µs with httpx (see ``http_pool`` for the numbers).
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

import orjson

from . import http_local, metrics
from .errors import OVERLOADED_HEADER, DomainError, Unavailable, from_status, peer_overloaded, status_of
from .http_pool import Answer, ConnectionPool, PeerUnreachable, header_block
from .internal_auth import CODE as INTERNAL_UNAUTHORIZED
from .internal_auth import auth_headers
from .logs import REQUEST_ID_HEADER, current_request_id
from .policies import PEER_REQUEST, RetryPolicy, retry

log = logging.getLogger(__name__)
T = TypeVar("T")


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
# Characters a path keeps as they are (RFC 3986 pchar and "/"); anything else
# is percent-encoded, so no caller's value can break the request line.
_PATH_SAFE = "/-._~!$&'()*+,;=:@"
_OVERLOADED = OVERLOADED_HEADER.lower()  # answers' header names are lower-cased


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
    """One peer service reached over HTTP (keep-alive pooled, ``http_pool``).
    ``token``: the service credential (``FANLINE_INTERNAL_TOKEN``) sent on
    every request. ``background``: every request is background work (the
    fan-out worker's), marked with ``PRIORITY_HEADER`` so the peer neither
    counts it against its admission limit (``admission.py``) nor yields its
    own background work to it."""

    def __init__(
        self, service: str, peer: str, base_url: str, timeout_s: float, *, token: str | None = None, background: bool = False
    ) -> None:
        self._service = service
        self._peer = peer
        url = urlsplit(base_url.rstrip("/"))
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"{peer}: a peer URL is http(s)://host[:port], not {base_url!r}")
        self._host, self._port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
        self._tls = url.scheme == "https"
        self._prefix = url.path  # a base path, if any
        static = {"host": url.netloc, **auth_headers(token), TIMEOUT_HEADER: str(int(timeout_s * 1000))}
        if background:
            static[PRIORITY_HEADER] = BACKGROUND
        self._static = header_block(static)
        self._static_pairs = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in static.items()]
        self._timeout_s = timeout_s
        # Created on first use: its connections belong to the running loop.
        self._pool: ConnectionPool | None = None
        # Looked up on first use: the hosting process registers its services before any request.
        self._local: http_local.LocalPeer | None = None
        self._local_checked = False
        self._metrics: dict[str, tuple[Any, Any]] = {}  # operation -> (latency, errors) label children

    def _connections(self) -> ConnectionPool:
        if self._pool is None:
            self._pool = ConnectionPool(self._host, self._port, ssl=ssl.create_default_context() if self._tls else None)
        return self._pool

    def _in_process(self) -> http_local.LocalPeer | None:
        if not self._local_checked:
            found = http_local.hosted(self._peer)
            self._local, self._local_checked = (http_local.LocalPeer(found) if found is not None else None), True
        return self._local

    def _observers(self, operation: str) -> tuple[Any, Any]:
        found = self._metrics.get(operation)
        if found is None:
            found = self._metrics[operation] = (
                metrics.PEER_LATENCY.labels(self._service, self._peer, operation),
                metrics.PEER_ERRORS.labels(self._service, self._peer, operation),
            )
        return found

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

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
        target = quote(self._prefix + path, safe=_PATH_SAFE)
        if params:
            target += "?" + urlencode({k: str(v) for k, v in params.items()})
        body = orjson.dumps(json) if json is not None else None
        dynamic: dict[str, str] = {}
        if body is not None:
            dynamic["content-type"] = "application/json"
        dynamic["content-length"] = str(len(body)) if body is not None else "0"
        request_id = current_request_id()  # the request (or event) this call serves
        if request_id:
            dynamic[REQUEST_ID_HEADER] = request_id
        if headers:
            dynamic.update(headers)
        block = header_block(dynamic)  # refuses CR, LF and NUL on either transport
        local = self._in_process()
        if local is None:
            head = f"{method} {target} HTTP/1.1\r\n".encode("latin-1") + self._static + block + b"\r\n"
        else:
            pairs = self._static_pairs + [(k.encode("latin-1"), v.encode("latin-1")) for k, v in dynamic.items()]

        async def send() -> Answer:
            if local is None:
                return await self._connections().request(head, body, self._timeout_s)
            return await local.request(method, target, pairs, body, self._timeout_s)

        return await self._attempts(operation, send, self._answer, policy)

    def offers(self, name: str) -> bool:
        """Whether the peer is hosted in this process and offers ``name`` as a
        plain call (``http_local.Direct``): then ``direct``, else ``call``."""
        local = self._in_process()
        return local is not None and local.offers(name)

    async def direct(self, name: str, path: str, *args: Any, operation: str, policy: RetryPolicy | None = PEER_REQUEST) -> Any:
        """``call`` for the plain call ``name`` (``offers``): ``args`` instead of
        a request to ``path``, the same answer, errors, retries and metrics."""
        local = self._in_process()
        assert local is not None

        async def send() -> Any:
            return await local.direct(name, self._prefix + path, self._timeout_s, *args)

        return await self._attempts(operation, send, lambda answer, _: answer, policy)

    async def _attempts(
        self,
        operation: str,
        send: Callable[[], Awaitable[T]],
        then: Callable[[T, Any], Any],
        policy: RetryPolicy | None,
    ) -> Any:
        """``send()`` under ``policy`` (None: once), each attempt timed and its
        failures counted (``operation``'s metrics): an unreachable peer is
        ``Unavailable``, and ``then(result, errors)`` makes the answer."""
        latency, errors = self._observers(operation)

        async def once() -> Any:
            started = time.perf_counter()
            try:
                result = await send()
            except PeerUnreachable as exc:
                errors.inc()
                raise Unavailable(f"{self._peer} unavailable ({exc})") from None
            except DomainError as exc:  # a plain call's error, as _answer counts a status
                if status_of(exc) >= 500:
                    errors.inc()
                raise
            finally:
                latency.observe(time.perf_counter() - started)
            return then(result, errors)

        if policy is None:
            return await once()
        return await retry(policy, once)

    def _answer(self, answer: Answer, errors: Any) -> Any:
        status = answer.status
        if status == 204:
            return None
        try:
            body = orjson.loads(answer.body) if answer.body else None
        except orjson.JSONDecodeError:
            body = None
        if status == 503 and _OVERLOADED in answer.headers:
            # The peer's admission control refused it before any work.
            errors.inc()
            raise peer_overloaded(self._peer, answer.headers.get("retry-after", ""))
        if status >= 400:
            if status >= 500:
                errors.inc()
            err = (body or {}).get("error", {}) if isinstance(body, dict) else {}
            if status == 401 and err.get("code") == INTERNAL_UNAUTHORIZED:
                # Our credential, not the user's: a deployment error,
                # shown as 503 (the worker waits), never as the user's 401.
                errors.inc()
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
