"""The peers' HTTP/1.1 transport (``fanline_shared.http_pool``) against a
scripted server on a real socket: framing, reuse, limits, and every way an
answer can fail to arrive. ``PeerClient``'s error mapping on top of it is in
test_internal_auth.py and test_caller_budget.py (aiohttp servers)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from fanline_shared.errors import Unavailable
from fanline_shared.http_client import PeerClient
from fanline_shared.http_pool import ConnectionPool, PeerUnreachable, header_block

Respond = Callable[[bytes], bytes | None]  # request head -> raw answer (None: hang up)


class Server:
    """Answers each request on a connection with ``respond(head)``."""

    def __init__(self, respond: Respond) -> None:
        self.respond = respond
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
                )
                body = await reader.readexactly(length) if length else b""
                self.requests.append(head + body)
                answer = self.respond(head)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                if b"connection: close" in answer:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Respond], Server]]:
    started: list[Server] = []

    def start(respond: Respond) -> Server:
        server = Server(respond)
        started.append(server)
        return server

    yield start
    for server in started:
        if server.server is not None:
            server.server.close()


async def running(server: Server) -> Server:
    server.server = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    return server


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def head(path: str = "/x") -> bytes:
    return f"GET {path} HTTP/1.1\r\n".encode() + header_block({"host": "t", "content-length": "0"}) + b"\r\n"


async def test_answers_are_framed_by_length_and_connections_reused(serve: Callable[[Respond], Server]) -> None:
    server = await running(serve(lambda _: ok(b'{"a": 1}', b"x-thing: Yes\r\n")))
    pool = ConnectionPool("127.0.0.1", server.port)
    for _ in range(3):
        answer = await pool.request(head(), None, 5)
        assert (answer.status, answer.body, answer.headers["x-thing"]) == (200, b'{"a": 1}', "Yes")
    assert server.connections == 1 and len(server.requests) == 3
    pool.close()


async def test_chunked_answers_and_answers_ended_by_closing(serve: Callable[[Respond], Server]) -> None:
    chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    server = await running(serve(lambda _: chunked))
    pool = ConnectionPool("127.0.0.1", server.port)
    assert (await pool.request(head(), None, 5)).body == b"abcde"
    closing = await running(serve(lambda _: b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end"))
    pool2 = ConnectionPool("127.0.0.1", closing.port)
    assert (await pool2.request(head(), None, 5)).body == b"until the end"
    assert (await pool2.request(head(), None, 5)).body == b"until the end"  # a new connection
    assert closing.connections == 2 and pool2.open_connections == 0
    pool.close()


async def test_no_content_answers(serve: Callable[[Respond], Server]) -> None:
    server = await running(serve(lambda _: b"HTTP/1.1 204 No Content\r\n\r\n"))
    pool = ConnectionPool("127.0.0.1", server.port)
    for _ in range(2):
        answer = await pool.request(head(), None, 5)
        assert (answer.status, answer.body) == (204, b"")
    assert server.connections == 1
    pool.close()


@pytest.mark.parametrize(
    "answer",
    [None, b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort", b"NOT HTTP AT ALL\r\n\r\n"],
    ids=["hung-up", "cut-short", "malformed"],
)
async def test_an_incomplete_answer_is_unreachable_and_the_connection_dropped(
    serve: Callable[[Respond], Server], answer: bytes | None
) -> None:
    calls = [0]

    def respond(_: bytes) -> bytes | None:
        calls[0] += 1
        return answer if calls[0] == 1 else ok(b"fine")

    server = await running(serve(respond))
    pool = ConnectionPool("127.0.0.1", server.port)
    with pytest.raises(PeerUnreachable):
        await pool.request(head(), None, 1)
    assert (await pool.request(head(), None, 5)).body == b"fine"  # on a fresh connection
    assert server.connections == 2
    pool.close()


async def test_a_timeout_is_unreachable_and_never_reuses_that_connection(serve: Callable[[Respond], Server]) -> None:
    late: list[bytes] = []

    def respond(h: bytes) -> bytes:
        late.append(h)
        return ok(b"late") if len(late) == 1 else ok(b"fresh")

    server = Server(respond)
    original = server.handle

    async def slow_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if server.connections == 0:
            await asyncio.sleep(0.5)  # the first connection answers after the timeout
        await original(reader, writer)

    server.server = await asyncio.start_server(slow_first, "127.0.0.1", 0)
    pool = ConnectionPool("127.0.0.1", server.port)
    with pytest.raises(PeerUnreachable, match="no answer within"):
        await pool.request(head(), None, 0.2)
    assert (await pool.request(head(), None, 5)).body == b"fresh"
    pool.close()
    server.server.close()


async def test_refused_connections_are_unreachable() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    with pytest.raises(PeerUnreachable):
        await ConnectionPool("127.0.0.1", port).request(head(), None, 2)


async def test_at_most_limit_connections_and_waiters_are_served(serve: Callable[[Respond], Server]) -> None:
    server = await running(serve(lambda _: ok(b"x")))
    pool = ConnectionPool("127.0.0.1", server.port, limit=2)
    answers = await asyncio.gather(*(pool.request(head(), None, 5) for _ in range(20)))
    assert all(a.body == b"x" for a in answers) and server.connections <= 2
    pool.close()


async def test_idle_connections_are_not_reused_past_idle_s(serve: Callable[[Respond], Server]) -> None:
    server = await running(serve(lambda _: ok(b"x")))
    pool = ConnectionPool("127.0.0.1", server.port, idle_s=0.1)
    await pool.request(head(), None, 5)
    await asyncio.sleep(0.2)
    await pool.request(head(), None, 5)
    assert server.connections == 2 and pool.open_connections == 1
    pool.close()


def test_header_values_that_could_break_the_framing_are_refused() -> None:
    for bad in ("a\r\nx-evil: 1", "a\nb", "a\0b"):
        with pytest.raises(ValueError):
            header_block({"authorization": bad})
    assert header_block({"a": "1", "b": "two words"}) == b"a: 1\r\nb: two words\r\n"


async def test_peer_client_encodes_paths_and_queries_and_maps_failures(serve: Callable[[Respond], Server]) -> None:
    server = await running(serve(lambda _: ok(b'{"ok": true}')))
    client = PeerClient("test", "peer", f"http://127.0.0.1:{server.port}", 5, token="t" * 20)
    assert await client.call("GET", "/internal/users/a b?#", operation="x", params={"q": "x y&z"}, policy=None) == {"ok": True}
    request_line = server.requests[-1].split(b"\r\n", 1)[0]
    assert request_line == b"GET /internal/users/a%20b%3F%23?q=x+y%26z HTTP/1.1"
    assert b"x-fanline-internal-token: " + b"t" * 20 in server.requests[-1]
    await client.call("POST", "/p", operation="x", json={"k": "v"}, policy=None)
    assert server.requests[-1].endswith(b'{"k":"v"}') and b"content-type: application/json" in server.requests[-1]
    await client.close()
    server.server.close()  # type: ignore[union-attr]
    await server.server.wait_closed()  # type: ignore[union-attr]
    with pytest.raises(Unavailable, match="peer unavailable"):
        await client.call("GET", "/x", operation="x", policy=None)
