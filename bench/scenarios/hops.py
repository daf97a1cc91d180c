"""The floor of one HTTP hop between Fanline's processes (``hop_floor``), and what
it adds up to for a request of the standard mix; docs/benchmark-methods.md."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .. import probes
from ..context import REPO, BenchError, Ctx, say, stop_process
from ..openloop import MIX
from ..system import spawn, wait_ready


def mix_floor(
    hops: Mapping[str, Sequence[float]], mix: Mapping[str, float], server_us: float, client_us: float
) -> tuple[float, float, float]:
    """(HTTP servers a request of ``mix`` passes, calls it makes, their CPU-s per 1,000
    requests) when each server hop costs ``server_us`` and each call ``client_us``."""
    if missing := set(mix) - set(hops):
        raise BenchError(f"hop_floor.hops names no {sorted(missing)}")
    total = sum(mix.values())
    servers = sum(w * hops[route][0] for route, w in mix.items()) / total
    calls = sum(w * hops[route][1] for route, w in mix.items()) / total
    return servers, calls, (servers * server_us + calls * client_us) / 1000


async def hop_floor(ctx: Ctx, p: dict[str, Any]) -> None:
    s = ctx.rec.scope("hop_floor")
    servers, calls, _ = mix_floor(p["hops"], MIX, 0.0, 0.0)  # the same for every server kind
    s("hops_per_request", servers, "", side="server")
    s("hops_per_request", calls, "", side="client")
    for k, kind in enumerate(p["servers"]):
        port = ctx.args.base_port + p["port_offset"] + k
        server = spawn([sys.executable, "-m", "bench.hop", "server", kind, str(port)], ctx.logs / f"hop-{kind}.log", cwd=REPO)
        try:
            await asyncio.to_thread(wait_ready, f"http://127.0.0.1:{port}/hop", server, 30, f"hop server {kind}")
            before = probes.cpu_clocks({"server": server.pid})
            argv = ["-m", "bench.hop", "client", str(port), str(p["rate"]), str(int(p["rate"] * p["seconds"]))]
            client = await asyncio.create_subprocess_exec(sys.executable, *argv, cwd=REPO, stdout=asyncio.subprocess.PIPE)
            out, _ = await client.communicate()
            after = probes.cpu_clocks({"server": server.pid})
        finally:
            stop_process(server)
        if client.returncode != 0:
            raise BenchError(f"hop client against {kind} exited with {client.returncode}")
        got = json.loads(out)
        server_us = (after["server"] - before["server"]) * 1e6 / got["requests"]
        client_us = got["cpu_s"] * 1e6 / got["requests"]
        s("cpu_us_per_request", server_us, "µs", side="server", server=kind)
        s("cpu_us_per_request", client_us, "µs", side="client", server=kind)
        s("p50_ms", got["p50_ms"], server=kind)
        s("requests", got["requests"], "", server=kind)
        _, _, floor = mix_floor(p["hops"], MIX, server_us, client_us)
        s("floor_cpu_s_per_1k", floor, server=kind)
        say(f"hop floor, {kind}: server {server_us:.0f} µs, client {client_us:.0f} µs per call; the mix's {floor:.2f} CPU-s/1k")
    s("rate_per_s", p["rate"])
