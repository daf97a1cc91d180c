"""An answer's head and body leave in one write (fanline_shared.http_coalesce):
the transport wrapper with a recording transport, then uvicorn serving a
Starlette app through the protocol on a real socket."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from fanline_shared.http_coalesce import CoalescingHttpToolsProtocol, _CoalescingTransport
from fanline_shared.http_server import UVICORN_SETTINGS


class Recording:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = self.aborted = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default


async def test_writes_of_one_pass_leave_as_one_and_a_lone_write_leaves_on_the_next_pass() -> None:
    real = Recording()
    t = _CoalescingTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    t.write(b"HTTP/1.1 200 OK\r\n\r\n")
    t.write(b"body")
    assert real.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
    t.write(b"chunk")
    assert real.writes[1:] == [] and t.get_write_buffer_size() == 5
    await asyncio.sleep(0)
    assert real.writes[1:] == [b"chunk"]
    t.write(b"last")
    t.close()  # what is held goes first
    assert real.writes[2:] == [b"last"] and real.closed
    assert t.get_extra_info("peername") == ("127.0.0.1", 1)  # the rest is the real transport's


async def test_abort_drops_what_is_held() -> None:
    real = Recording()
    t = _CoalescingTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    t.write(b"held")
    t.abort()
    await asyncio.sleep(0)
    assert real.writes == [] and real.aborted


def test_the_services_server_uses_it() -> None:
    assert UVICORN_SETTINGS["http"] is CoalescingHttpToolsProtocol


async def test_uvicorn_sends_a_whole_answer_in_one_write_and_streams_chunks(monkeypatch: Any) -> None:
    sizes: list[int] = []
    original = _CoalescingTransport.flush

    def counted(self: _CoalescingTransport) -> None:
        held = sum(len(chunk) for chunk in self._held)
        if held:
            sizes.append(held)
        original(self)

    monkeypatch.setattr(_CoalescingTransport, "flush", counted)

    async def chunks() -> Any:
        for part in (b"a", b"b"):
            yield part
            await asyncio.sleep(0.01)

    async def whole(_: Any) -> JSONResponse:
        return JSONResponse({"items": [1, 2, 3]})

    async def stream(_: Any) -> StreamingResponse:
        return StreamingResponse(chunks(), media_type="text/plain")

    app = Starlette(routes=[Route("/whole", whole), Route("/stream", stream)])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    settings = {**UVICORN_SETTINGS, "loop": "asyncio"}
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", **settings))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /whole HTTP/1.1\r\nhost: x\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(v for k, _, v in (line.partition(b": ") for line in head.split(b"\r\n")) if k == b"content-length"))
        body = await reader.readexactly(length)
        assert body == b'{"items":[1,2,3]}'
        assert sizes == [len(head) + length]  # one write: head and body together
        sizes.clear()
        writer.write(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
        await reader.readuntil(b"0\r\n\r\n")
        assert len(sizes) >= 2  # the chunks, 10 ms apart, each left on its own
        writer.close()
    finally:
        server.should_exit = True
        await serving
