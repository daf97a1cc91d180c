"""The driver's connections on the service's own event loop.

cassandra-driver's reactors (libev, asyncore, asyncio) run their I/O in a
thread of their own. Each statement then crosses threads twice: the caller
queues the request and wakes the reactor thread to write it; the reactor
thread reads the answer and wakes the caller's loop to resume the awaiting
task — two wake-ups and two GIL hand-offs per statement, and a third of a
storage service's CPU spent in the reactor thread (py-spy, home reads at
30/s).

``LoopConnection`` is a ``cassandra.connection.Connection`` whose socket is
watched by the asyncio loop that awaits the statements (uvloop in the
services): a request made on that loop is written at once with ``send``, and
the answer is parsed and handed to its callbacks in the same thread, so no
statement crosses threads. Calls from other threads (the driver's control
connection, heartbeats and pool refills run in its executor threads) are
handed to the loop with ``call_soon_threadsafe`` — FIFO, so a connection's
writes keep their order.

The contract is the driver's own for its reactor thread, plus one rule: the
loop must not block on the driver. Blocking calls (``Cluster.connect``,
``Session.prepare``, ``Session.execute``, schema agreement) wait for answers
that only this loop can read, so they run in ``asyncio.to_thread`` — as every
caller here already does (``connection.open_session``, ``keyspace``,
``migrations``). Connections of a closed loop fail as if the node had gone.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from cassandra.connection import Connection, ConnectionShutdown

log = logging.getLogger(__name__)

_NONBLOCKING = (errno.EAGAIN, errno.EWOULDBLOCK)
_SSL_WANT = (ssl.SSL_ERROR_WANT_READ, ssl.SSL_ERROR_WANT_WRITE)


def _nothing() -> None:
    pass


class _Timer:
    """``create_timer``'s handle: ``callback`` after ``timeout`` s on the loop,
    unless cancelled first (from any thread)."""

    __slots__ = ("_callback", "_cancelled", "_conn", "_handle", "end")

    def __init__(self, conn: type[LoopConnection], timeout: float, callback: Callable[[], Any]) -> None:
        self.end = time.time() + timeout
        self._conn = conn
        self._callback = callback
        self._cancelled = False
        self._handle: asyncio.TimerHandle | None = None
        conn.call_in_loop(self._arm)  # at once on the loop's thread

    def _arm(self) -> None:
        if not self._cancelled:
            self._handle = self._conn.loop.call_later(max(0.0, self.end - time.time()), self._fire)

    def _fire(self) -> None:
        if not self._cancelled:
            self._cancelled = True
            self._callback()

    def cancel(self) -> None:
        self._cancelled = True
        self._callback = _nothing  # the request it would call back is done: let it go
        handle, self._handle = self._handle, None
        if handle is not None:
            self._conn.call_in_loop(handle.cancel)


class LoopConnection(Connection):  # type: ignore[misc]
    """A driver connection served by one asyncio loop (see the module's
    docstring). Use ``for_loop(loop)`` to get the class to hand the
    ``Cluster`` as its ``connection_class``."""

    loop: asyncio.AbstractEventLoop
    loop_thread: int
    is_closed: bool  # the driver's (Connection), set under its lock

    @classmethod
    def for_loop(cls, loop: asyncio.AbstractEventLoop) -> type[LoopConnection]:
        """The connection class of ``loop`` (call it on that loop's thread)."""
        return type("LoopConnection", (cls,), {"loop": loop, "loop_thread": threading.get_ident()})

    @classmethod
    def initialize_reactor(cls) -> None:
        """Nothing to start: the loop is the service's."""

    @classmethod
    def handle_fork(cls) -> None:
        """The loop belongs to the process that made it; nothing is shared."""

    @classmethod
    def on_loop(cls) -> bool:
        return threading.get_ident() == cls.loop_thread

    @classmethod
    def call_in_loop(cls, fn: Callable[..., Any], *args: Any) -> bool:
        """Run ``fn(*args)`` on the loop (now, if this is its thread); False if
        the loop is closed."""
        if cls.on_loop():
            fn(*args)
            return True
        try:
            cls.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed
            return False
        return True

    @classmethod
    def create_timer(cls, timeout: float, callback: Callable[[], Any]) -> _Timer:
        return _Timer(cls, timeout, callback)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        Connection.__init__(self, *args, **kwargs)
        self._out: deque[bytes] = deque()
        self._watching_writes = False
        self._reading = False
        self._connect_socket()  # blocking (and the TLS handshake): the caller is an executor thread
        self._socket.setblocking(False)
        self._fd = self._socket.fileno()
        if not self.call_in_loop(self._start_reading):
            self._socket.close()
            raise ConnectionShutdown(f"connection to {self.endpoint}: the event loop is closed")
        self._send_options_message()

    # --- on the loop ----------------------------------------------------------------

    def _start_reading(self) -> None:
        if self.is_closed:
            return
        self.loop.add_reader(self._fd, self._handle_read)
        self._reading = True

    def _stop_watching(self) -> None:
        if self._reading:
            self.loop.remove_reader(self._fd)
            self._reading = False
        if self._watching_writes:
            self.loop.remove_writer(self._fd)
            self._watching_writes = False
        self._socket.close()

    def _handle_read(self) -> None:
        try:
            while True:
                buf = self._socket.recv(self.in_buffer_size)
                self._iobuf.write(buf)
                if len(buf) < self.in_buffer_size:
                    break
        except ssl.SSLError as err:
            if err.args[0] not in _SSL_WANT:
                self.defunct(err)
                return
            if not self._iobuf.tell():
                return
        except OSError as err:
            if err.args[0] not in _NONBLOCKING:
                self.defunct(err)
                return
            if not self._iobuf.tell():
                return
        if self._iobuf.tell():
            self.process_io_buffer()
        else:
            log.debug("Connection %s closed by server", self)
            self.close()

    def _write(self, chunks: list[bytes]) -> None:
        if self.is_closed:
            return
        self._out.extend(chunks)
        if not self._watching_writes:
            self._flush()

    def _flush(self) -> None:
        out = self._out
        while out:
            data = out[0]
            try:
                sent = self._socket.send(data)
            except OSError as err:
                if err.args[0] in _NONBLOCKING or (isinstance(err, ssl.SSLError) and err.args[0] in _SSL_WANT):
                    self._watch_writes()
                else:
                    self.defunct(err)
                return
            if sent < len(data):
                out[0] = data[sent:]
                self._watch_writes()
                return
            out.popleft()
        if self._watching_writes:
            self.loop.remove_writer(self._fd)
            self._watching_writes = False

    def _watch_writes(self) -> None:
        if not self._watching_writes and not self.is_closed:
            self.loop.add_writer(self._fd, self._flush)
            self._watching_writes = True

    # --- the driver's interface (any thread) ------------------------------------------

    def push(self, data: bytes) -> None:
        size = self.out_buffer_size
        chunks = [data[i : i + size] for i in range(0, len(data), size)] if len(data) > size else [data]
        if not self.call_in_loop(self._write, chunks):
            self.defunct(ConnectionShutdown(f"connection to {self.endpoint}: the event loop is closed"))

    def close(self) -> None:
        with self.lock:
            if self.is_closed:
                return
            self.is_closed = True
        log.debug("Closing connection (%s) to %s", id(self), self.endpoint)
        if not self.call_in_loop(self._stop_watching):
            self._socket.close()  # the loop is gone, and its watchers with it
        if not self.is_defunct:
            # don't leave in-progress operations hanging
            self.error_all_requests(ConnectionShutdown(f"Connection to {self.endpoint} was closed"))
