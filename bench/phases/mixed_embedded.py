"""The embedded default measured too (issue 18 item 5): the same mixed
workload at a lower rate (``plan.embedded_rate`` for ``plan.embedded_s``)
against what ``make run`` starts — SQLite and the tansu broker — on its own
ports, with its own smaller population, so a laptop user knows what to
expect. Records ``mixed_embedded``."""

from __future__ import annotations

import asyncio
import random

from .. import workload
from ..common import SYSTEM_ENV, say
from ..harness import Bench
from ..procs import BenchSystem


async def run(bench: Bench) -> None:
    p = bench.plan
    base_port = bench.args.base_port + 200
    # Only the cheap-argon2 settings of the bench; the rest is make run's defaults.
    env = {k: v for k, v in SYSTEM_ENV.items() if k.startswith("FANLINE_ARGON2") or k == "FANLINE_LOG_LEVEL"}
    system = BenchSystem(data_dir=bench.tmp / "embedded", base_port=base_port, extra_env=env, log_dir=bench.logs / "embedded")
    say(f"embedded default: SQLite + tansu on ports {base_port}+")
    await asyncio.to_thread(system.start, 120)
    try:
        seeded = await workload.seed(
            system.url("api"),
            f"e{bench.tag}",
            p.embedded_users,
            min(p.open_mean_following, max(1, p.embedded_users // 4)),
            random.Random(f"{bench.tag}-embedded"),
        )
        say(f"embedded default: {p.embedded_rate:g} requests/s for {p.embedded_s:g}s")
        step = await asyncio.to_thread(
            workload.run_step,
            workload.target_of(system),
            seeded,
            p.embedded_rate,
            p.embedded_s,
            bench.tmp / "embedded-load",
            random.Random(f"{bench.tag}-emb"),
        )
    finally:
        await asyncio.to_thread(system.stop)
    bench.doc["mixed_embedded"] = {
        **step,
        "users": p.embedded_users,
        "backend": "SQLite + tansu (make run)",
        "method": workload.method_note(),
    }
