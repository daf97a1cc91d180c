"""One client process of the streams phase (phases/streams.py): holds many home
streams open, read like an EventSource, and records when each ``update``
arrived. Runs apart from the harness so that reading 1,000 streams never
competes with the poster or the measurements for one event loop; the phase
starts several and reports their CPU.

Line protocol (one JSON object per line). stdin: first
``{"api": ..., "tokens": [...]}``, then commands ``count`` and ``report``.
stdout: ``{"opened": n, "seconds": s}`` once every stream answered ``200``,
``{"received": n}`` for each ``count``, and for ``report`` everything recorded
(``arrivals``: ``[stream index, tweet id, unix time]``), after which it exits.

    python -m bench.stream_reader   # started by the phase, not by hand
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from typing import Any

import aiohttp

BATCH = 50  # streams opened at once
LAG_TICK_S = 0.1


class Stream:
    def __init__(self, http: aiohttp.ClientSession, url: str, token: str, index: int, sink: list[Any]) -> None:
        self.http, self.url, self.token, self.index, self.sink = http, url, token, index, sink
        self.comments: list[float] = []
        self.ended: str | None = None
        self.opened = asyncio.get_running_loop().create_future()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async with self.http.get(self.url, headers={"Authorization": f"Bearer {self.token}"}) as r:
                if r.status != 200:
                    raise RuntimeError(f"stream answered {r.status}: {(await r.text())[:200]}")
                self.opened.set_result(None)
                event, event_id = "", None
                async for raw in r.content:
                    line = raw.decode().rstrip("\r\n")
                    if line == "":
                        if event == "update" and event_id:
                            self.sink.append((self.index, event_id, time.time()))
                        event, event_id = "", None
                    elif line.startswith(":"):
                        self.comments.append(time.time())
                    elif line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("id:"):
                        event_id = line[3:].strip()
                self.ended = "closed by the server"
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported, and to whoever waits for the stream to open
            self.ended = repr(exc)[:200]
            if not self.opened.done():
                self.opened.set_exception(exc)


async def _lag_monitor(lags: list[float]) -> None:
    """How late this process's event loop wakes up: large values would mean
    the client, not the gateway, delayed the updates."""
    loop = asyncio.get_running_loop()
    while True:
        t = loop.time()
        await asyncio.sleep(LAG_TICK_S)
        lags.append((loop.time() - t - LAG_TICK_S) * 1000)


async def main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def out(obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    setup = json.loads(await reader.readline())
    tokens: list[str] = setup["tokens"]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < len(tokens) + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, len(tokens) + 1000), hard))
    arrivals: list[Any] = []
    lags: list[float] = []
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as http:
        url = f"{setup['api']}/v1/streaming/home"
        started = time.monotonic()
        streams: list[Stream] = []
        for start in range(0, len(tokens), BATCH):
            batch = [Stream(http, url, tokens[i], i, arrivals) for i in range(start, min(start + BATCH, len(tokens)))]
            streams.extend(batch)
            await asyncio.gather(*(s.opened for s in batch))
        out({"opened": len(streams), "seconds": round(time.monotonic() - started, 2)})
        lag_task = asyncio.create_task(_lag_monitor(lags))
        while True:
            command = (await reader.readline()).decode().strip()
            if command == "count":
                out({"received": len(arrivals)})
            elif command in ("report", ""):
                break
        lag_task.cancel()
        lags.sort()
        out(
            {
                "arrivals": arrivals,
                "comments": [s.comments for s in streams],
                "ended": [s.ended for s in streams if s.ended is not None],
                "loop_lag_ms": {
                    "p99": round(lags[int(0.99 * (len(lags) - 1))], 1) if lags else None,
                    "max": round(lags[-1], 1) if lags else None,
                },
            }
        )
        for s in streams:
            s.task.cancel()
        await asyncio.gather(*(s.task for s in streams), return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(main())
