"""A TCP proxy that adds a fixed latency in each direction (harness only).

    python -m bench.latency_proxy --listen 127.0.0.1:39042 --target 127.0.0.1:9042 --delay-ms 5

Every chunk read from one side is written to the other ``delay`` seconds
after it arrived, in order: the connection gets ``delay`` more one-way
latency (``2 * delay`` per round trip) but no bandwidth limit, as a longer
wire would. The benchmark's latency-scaling phase puts it between the
services and Cassandra, so the fan-out is bound by round trips rather than by
this machine's two cores. It runs as its own process (one event loop, uvloop
when installed) so that its CPU is not the harness's; ``--stats`` prints the
bytes forwarded on exit.

On a single Cassandra node the driver cannot bypass it: the node has no
``system.peers`` rows, and the driver keeps the contact point's address and
port for the node it reached through it (checked by the phase before it
measures anything).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from collections import deque

CHUNK = 256 * 1024


class _Pipe:
    """One direction of one connection: chunks released ``delay`` s after arrival."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
        self._reader = reader
        self._writer = writer
        self._delay = delay
        self._queue: deque[tuple[float, bytes]] = deque()
        self._ready = asyncio.Event()
        self._eof = False
        self.bytes = 0

    async def read_loop(self) -> None:
        try:
            while data := await self._reader.read(CHUNK):
                self._queue.append((time.monotonic() + self._delay, data))
                self._ready.set()
        except (ConnectionError, OSError):
            pass
        finally:
            self._eof = True
            self._ready.set()

    async def write_loop(self) -> None:
        try:
            while True:
                if not self._queue:
                    if self._eof:
                        break
                    self._ready.clear()
                    await self._ready.wait()
                    continue
                due, data = self._queue[0]
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                self._queue.popleft()
                self._writer.write(data)
                self.bytes += len(data)
                await self._writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                self._writer.close()


class LatencyProxy:
    def __init__(self, target_host: str, target_port: int, delay_s: float) -> None:
        self.target = (target_host, target_port)
        self.delay = delay_s
        self.connections = 0
        self.bytes = 0

    async def handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.close()
            return
        self.connections += 1
        pipes = [_Pipe(client_r, server_w, self.delay), _Pipe(server_r, client_w, self.delay)]
        try:
            await asyncio.gather(*(p.read_loop() for p in pipes), *(p.write_loop() for p in pipes))
        except asyncio.CancelledError:  # shutting down
            for w in (client_w, server_w):
                w.close()
        self.bytes += sum(p.bytes for p in pipes)


async def serve(listen: tuple[str, int], proxy: LatencyProxy) -> None:
    server = await asyncio.start_server(proxy.handle, *listen)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        print(
            f"latency proxy {listen[0]}:{listen[1]} -> {proxy.target[0]}:{proxy.target[1]}, +{proxy.delay * 1000:g} ms each way",
            flush=True,
        )
        await stop.wait()


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency_proxy", description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=_addr, required=True, help="host:port to listen on")
    parser.add_argument("--target", type=_addr, required=True, help="host:port to forward to")
    parser.add_argument("--delay-ms", type=float, default=5.0, help="added latency each way (default 5)")
    parser.add_argument("--stats", action="store_true", help="print connections and bytes on exit")
    args = parser.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    proxy = LatencyProxy(args.target[0], args.target[1], args.delay_ms / 1000)
    asyncio.run(serve(args.listen, proxy))
    if args.stats:
        print(f"connections {proxy.connections}, bytes {proxy.bytes}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
