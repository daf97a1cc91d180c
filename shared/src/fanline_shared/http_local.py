"""In-process calls to a service hosted in the same process: the other
transport under ``http_client.PeerClient`` (the first is ``http_pool``).

A process started with ``FANLINE_HOSTED_SERVICES`` (``colocation.py``) runs
the gateway and the storage services it names on one event loop, each
still listening on its own port for the other processes (the fan-out
worker, tools). A ``PeerClient`` in that process whose peer is hosted here
hands the request to the peer's ASGI app directly: the same request line,
headers and JSON body, through the peer's own middlewares (internal
credential, admission control, metrics) and routes, and the same answer —
without the socket, the HTTP framing on both sides, and the wake-up of a
second process (issue 31: a request of the standard mix passed 2.56 HTTP
servers; at a low rate each hop's wake-up costs more than its work,
docs/benchmark-methods.md, "What the same code costs at a low rate").

What the peer sees is what uvicorn would have given it: an ``http`` scope
with the caller's headers, ``client`` 127.0.0.1, ``server`` the peer's
address, and the lifespan state uvicorn keeps for it. Each call runs in a
task of its own, so context variables the peer sets (its request id, its
log fields) never leak into the caller's, and the caller's timeout cancels
it as a dropped connection would. An exception the peer's app lets escape
becomes a 500, as uvicorn answers it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from .http_pool import Answer, PeerUnreachable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hosted:
    """A service hosted in this process: its ASGI app (after its lifespan
    started), its address and the lifespan state uvicorn gives its requests."""

    app: Any
    server: tuple[str, int]
    state: Callable[[], Mapping[str, Any]]


_HOSTED: dict[str, Hosted] = {}  # service name -> where it is served in this process


def host(service: str, hosted: Hosted) -> None:
    """Route this process's calls to ``service`` to ``hosted`` (``colocation``)."""
    _HOSTED[service] = hosted


def unhost(service: str) -> None:
    _HOSTED.pop(service, None)


def hosted(service: str) -> Hosted | None:
    """The in-process ``service``, if this process hosts it."""
    return _HOSTED.get(service)


class LocalPeer:
    """Requests to a hosted service's ASGI app, answered as ``http_pool``'s."""

    def __init__(self, target: Hosted) -> None:
        self._target = target

    async def request(
        self, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes | None, timeout_s: float
    ) -> Answer:
        path, _, query = target.partition("?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": unquote(path),
            "raw_path": path.encode("latin-1"),
            "query_string": query.encode("latin-1"),
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 0),
            "server": self._target.server,
            "state": dict(self._target.state()),
        }
        exchange = _Exchange(body or b"")
        task = asyncio.create_task(self._run(scope, exchange))
        try:
            async with asyncio.timeout(timeout_s):
                return await task
        except TimeoutError:
            raise PeerUnreachable(f"no answer within {timeout_s:g} s") from None
        finally:
            if not task.done():
                task.cancel()

    async def _run(self, scope: dict[str, Any], exchange: _Exchange) -> Answer:
        try:
            await self._target.app(scope, exchange.receive, exchange.send)
        except Exception:
            # As uvicorn: logged; the answer sent stands (Starlette sends its
            # 500 and re-raises), a half-sent one is a broken connection, and
            # none at all is a 500.
            log.exception("hosted service %s failed on %s %s", self._target.server, scope["method"], scope["path"])
            if not exchange.started:
                return Answer(500, {"content-type": "application/json"}, b"")
            if not exchange.complete:
                raise PeerUnreachable("the hosted service failed while answering") from None
        finally:
            exchange.finish()
        if not exchange.complete:
            raise PeerUnreachable("the hosted service returned without a complete answer")
        return Answer(exchange.status, exchange.headers, b"".join(exchange.body))


class _Exchange:
    """One request's ``receive`` and ``send``."""

    def __init__(self, body: bytes) -> None:
        self._request: bytes | None = body
        self._done = asyncio.Event()
        self.started = False
        self.complete = False
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []

    async def receive(self) -> dict[str, Any]:
        if self._request is not None:
            body, self._request = self._request, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self._done.wait()  # as a connection that stays open until the answer is sent
        return {"type": "http.disconnect"}

    async def send(self, message: Mapping[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.started = True
            self.status = int(message["status"])
            # Lower-case names, a repeated header keeps its last value: as http_pool's answers.
            self.headers = {bytes(k).decode("latin-1").lower(): bytes(v).decode("latin-1") for k, v in message.get("headers", ())}
        elif kind == "http.response.body":
            chunk = message.get("body", b"")
            if chunk:
                self.body.append(bytes(chunk))
            if not message.get("more_body", False):
                self.complete = True
                self._done.set()

    def finish(self) -> None:
        self._done.set()
