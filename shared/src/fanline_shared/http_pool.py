"""HTTP/1.1 keep-alive connections to one peer: the transport under
``http_client.PeerClient``.

Why not aiohttp's client (used until 2026-11): measured on this code's
request shape — a GET with the internal headers answered by a 20-tweet JSON
page from uvicorn + httptools, 8 in flight, 5,000 calls — aiohttp cost
150-190 µs of client CPU per call (120 µs tuned: prebuilt URL, no per-request
timeout object), this module 40-60 µs; the server side spent 40-70 µs less
per request too (one write per request, fewer headers to parse). Every post,
timeline read and fan-out page makes one or more of these calls, so the
difference was a measurable share of a request's whole cost (issue 31).

It is small because the peers are ours: HTTP/1.1 only, one request at a time
per connection (no pipelining), responses framed by Content-Length or
chunked encoding (uvicorn and aiohttp servers send one of the two) or, with
``Connection: close``, by the end of the connection. Parsing is httptools'
(the C parser uvicorn itself uses); this module frames requests, keeps
connections and turns every transport failure into ``PeerUnreachable``.

Connections are reused newest first and closed after ``idle_s`` unused
(15 s, well before the servers' 75 s keep-alive, so a request never goes out
on a connection the server is closing); at most ``limit`` are open at once
and callers beyond it wait in arrival order. A connection whose request
failed, timed out or was cancelled is closed, never reused: its answer could
still arrive.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
import time
from collections import deque
from dataclasses import dataclass
from typing import cast

import httptools


class PeerUnreachable(Exception):
    """The request got no (complete) answer: refused, reset, closed early,
    malformed, or past its timeout."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes


_BAD_HEADER_CHARS = frozenset("\r\n\0")


def header_block(headers: dict[str, str]) -> bytes:
    """``name: value\\r\\n`` lines; a name or value that could break the
    framing (CR, LF, NUL) is refused."""
    lines = []
    for name, value in headers.items():
        if _BAD_HEADER_CHARS.intersection(name) or _BAD_HEADER_CHARS.intersection(value):
            raise ValueError(f"invalid character in header {name!r}")
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines).encode("latin-1")


class _Connection(asyncio.Protocol):
    """One TCP connection; ``exchange`` sends a request and awaits its answer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Answer] | None = None
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._headers_done = False
        self._keep_alive = True

    # --- asyncio.Protocol -----------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport subclasses

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # nothing asked: a server talking out of turn
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(PeerUnreachable(f"malformed answer: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is not None and not self._waiter.done():
            if self._headers_done and not self._keep_alive:
                self._finish()  # framed by the end of the connection
            else:
                self._waiter.set_exception(PeerUnreachable(f"connection closed before the answer ({exc or 'EOF'})"))

    # --- httptools callbacks ----------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._headers_done = True
        self._keep_alive = self._parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._finish()

    # --- ours ---------------------------------------------------------------------
    def _finish(self) -> None:
        waiter, self._waiter = self._waiter, None
        answer = Answer(self._parser.get_status_code(), self._headers, b"".join(self._body))
        self._headers, self._body, self._headers_done = {}, [], False
        if not self._keep_alive:
            self.close()
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    def _fail(self, error: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        self.close()
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def exchange(self, request: bytes) -> asyncio.Future[Answer]:
        assert self.transport is not None and self._waiter is None
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self._waiter

    @property
    def reusable(self) -> bool:
        return not self.closed and self._keep_alive and self._waiter is None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class ConnectionPool:
    """Keep-alive connections to ``host:port`` (TLS with ``ssl``)."""

    def __init__(
        self, host: str, port: int, *, ssl: ssl_module.SSLContext | None = None, limit: int = 200, idle_s: float = 15.0
    ) -> None:
        self._host = host
        self._port = port
        self._ssl = ssl
        self._limit = limit
        self._idle_s = idle_s
        self._idle: list[_Connection] = []  # newest last
        self._open = 0  # connections open or being opened (idle ones included)
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def open_connections(self) -> int:
        return self._open

    async def request(self, head: bytes, body: bytes | None, timeout_s: float) -> Answer:
        """Send ``head`` (request line and headers, ending in a blank line)
        and ``body``; the answer, or ``PeerUnreachable``."""
        try:
            async with asyncio.timeout(timeout_s):
                conn = await self._acquire()
                try:
                    answer = await conn.exchange(head + body if body else head)
                except BaseException:
                    conn.close()  # an answer may still come: never reuse it
                    self._release(conn)
                    raise
                self._release(conn)
                return answer
        except TimeoutError:
            raise PeerUnreachable(f"no answer within {timeout_s:g} s") from None
        except OSError as exc:
            raise PeerUnreachable(f"{type(exc).__name__}: {exc}") from None

    async def _acquire(self) -> _Connection:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if conn.reusable and now - conn.idle_since < self._idle_s:
                return conn
            conn.close()
            self._open -= 1
        while self._open >= self._limit:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken as we gave up: the turn goes to the next
                else:
                    waiter.cancel()
                raise
            if self._idle:
                return await self._acquire()
        self._open += 1
        try:
            _, conn = await asyncio.get_running_loop().create_connection(
                _Connection, self._host, self._port, ssl=self._ssl, server_hostname=self._host if self._ssl else None
            )
        except BaseException:
            self._open -= 1
            self._wake()
            raise
        return conn

    def _release(self, conn: _Connection) -> None:
        if conn.reusable:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()
            self._open -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._open -= len(self._idle)
        self._idle.clear()
