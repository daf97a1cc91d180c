"""One client process of the streams scenario: holds many home streams open, read
like an EventSource, recording when each ``update`` and heartbeat arrived — apart
from the harness, so reading 1,000 streams never competes with the poster.

stdin: ``{"api": ..., "tokens": [...]}``; stdout: ``{"opened": n}`` once every
stream answered 200; when stdin closes, everything recorded (``arrivals``: [stream
index, tweet id, unix time]; ``comments``: per stream, when heartbeats came;
``ended``; ``loop_lag_max_ms``, how late this process's event loop woke).
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from typing import Any

import aiohttp
from aiohttp import ClientSession


async def _stream(http: ClientSession, url: str, token: str, i: int, out: dict[str, Any], opened: asyncio.Future[None]) -> None:
    try:
        async with http.get(url, headers={"Authorization": f"Bearer {token}"}) as r:
            if r.status != 200:
                raise RuntimeError(f"stream answered {r.status}")
            opened.set_result(None)
            fields: dict[str, str] = {}
            async for raw in r.content:
                if (line := raw.decode().rstrip("\r\n")).startswith(":"):
                    out["comments"][i].append(time.time())
                elif line:
                    key, _, value = line.partition(":")
                    fields[key] = value.strip()
                elif fields.pop("event", "") == "update" and (event_id := fields.pop("id", "")):
                    out["arrivals"].append((i, event_id, time.time()))
            out["ended"].append("closed by the server")
    except Exception as exc:  # noqa: BLE001 - reported, and to whoever waits for the stream to open
        out["ended"].append(repr(exc)[:200])
        if not opened.done():
            opened.set_exception(exc)


async def main() -> None:
    loop, stdin = asyncio.get_running_loop(), asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    setup = json.loads(await stdin.readline())
    tokens, url = setup["tokens"], f"{setup['api']}/v1/streaming/home"
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    out: dict[str, Any] = {"arrivals": [], "comments": [[] for _ in tokens], "ended": [], "loop_lag_max_ms": 0.0}
    timeout, connector = aiohttp.ClientTimeout(total=None, sock_connect=30), aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
        tasks = []
        for start in range(0, len(tokens), 50):  # 50 at a time
            opened = [loop.create_future() for _ in tokens[start : start + 50]]
            tasks += [asyncio.create_task(_stream(http, url, tokens[start + k], start + k, out, f)) for k, f in enumerate(opened)]
            await asyncio.gather(*opened)
        print(json.dumps({"opened": len(tokens)}), flush=True)
        done = asyncio.create_task(stdin.read())
        while not done.done():  # how late the loop wakes: large values would mean the client delayed updates
            t = loop.time()
            await asyncio.wait([done], timeout=0.1)
            out["loop_lag_max_ms"] = max(out["loop_lag_max_ms"], (loop.time() - t - 0.1) * 1000 if not done.done() else 0.0)
        print(json.dumps(out), flush=True)
        for task in tasks:
            task.cancel()


if __name__ == "__main__":
    asyncio.run(main())
