"""A TCP proxy adding a fixed latency each way (harness only): every chunk read from one
side is written to the other ``delay`` after it arrived, in order — a longer wire, no
bandwidth limit. Its own process, so its CPU is not the harness's.

    python -m bench.latency_proxy --listen 127.0.0.1:PORT --target HOST:PORT --delay-ms MS
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import time
from collections import deque


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """One direction of one connection."""
    queue: deque[tuple[float, bytes]] = deque()
    ready, eof = asyncio.Event(), asyncio.Event()

    async def read() -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(256 * 1024):
                queue.append((time.monotonic() + delay, data))
                ready.set()
        eof.set()
        ready.set()

    async def write() -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while queue or not eof.is_set():
                if not queue:
                    ready.clear()
                    await ready.wait()
                    continue
                await asyncio.sleep(max(0.0, queue[0][0] - time.monotonic()))
                writer.write(queue.popleft()[1])
                await writer.drain()
        writer.close()

    await asyncio.gather(read(), write())


async def serve(listen: str, target: str, delay: float) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*target.rsplit(":", 1))
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pipe(client_r, server_w, delay), _pipe(server_r, client_w, delay))

    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with await asyncio.start_server(handle, *listen.rsplit(":", 1)):
        await stop.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.latency_proxy", description=(__doc__ or "").splitlines()[0])
    for flag, text in (("--listen", "host:port to listen on"), ("--target", "host:port to forward to")):
        parser.add_argument(flag, required=True, help=text)
    parser.add_argument("--delay-ms", type=float, default=5.0, help="added latency each way (default 5)")
    args = parser.parse_args()
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    asyncio.run(serve(args.listen, args.target, args.delay_ms / 1000))
