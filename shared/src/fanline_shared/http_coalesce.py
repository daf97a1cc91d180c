"""uvicorn's httptools protocol with an answer's head and body in one write.

uvicorn writes the status line and headers as soon as the app sends
``http.response.start``, and the body on ``http.response.body``: two
``send`` system calls, two TCP segments and two wake-ups of the reader for
every answer of every service. On loopback a send also runs the receiver's
TCP processing, so the first of them showed as 11.6 % of the gateway's
samples while it served home reads (py-spy during
``python -m bench.run --only read_path``, 2026-12-06): the largest single self-time entry of that process.

``CoalescingHttpToolsProtocol`` gives uvicorn a transport that holds a write
issued after an idle moment until the next one or the end of the loop's
current pass, whichever comes first, and then sends everything held in one
call. An app's start and body are sent in the same pass (nothing is awaited
between them), so a whole answer leaves in one write; a streamed answer's
chunks go out one pass later at most. Order is kept, and ``close`` sends
what is held first.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class _CoalescingTransport:
    """A transport whose writes within one pass of the loop leave as one."""

    __slots__ = ("_flush_handle", "_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        self._flush_handle: asyncio.Handle | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._held:
            self._held.append(bytes(data))
            self._flush_handle = self._loop.call_soon(self.flush)
            return
        self._held.append(bytes(data))
        self.flush()

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        """Send what is held, in one write."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if self._held:
            data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
            self._held = []
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = []
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(chunk) for chunk in self._held)

    def __getattr__(self, name: str) -> Any:
        # Everything else (get_extra_info, is_closing, pause_reading,
        # set_protocol, ...) is the real transport's.
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, writing through ``_CoalescingTransport``
    (``UVICORN_SETTINGS["http"]``)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
