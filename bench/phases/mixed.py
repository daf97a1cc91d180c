"""Open-loop mixed load (issue 18 item 3): the seeded population posting,
reading, following and signing in at one steady rate for ``plan.mixed_s``
(5 minutes in a full run). Records ``mixed_load``: p50/p99 per route,
errors and refusals, delivery lag p99, CPU-seconds of every Fanline
process per 1,000 requests, and the generator's achieved rate and CPU."""

from __future__ import annotations

import asyncio
import random

from .. import quiesce, workload
from ..common import say
from ..harness import Bench


async def run(bench: Bench) -> None:
    p = bench.plan
    assert bench.system is not None
    seeded = await workload.seeded(bench)
    bench.details.setdefault("compactions_settled", {})["mixed"] = await quiesce.settle_compactions(bench.session, "mixed")
    say(f"mixed load: {p.mixed_rate:g} requests/s for {p.mixed_s:g}s, open loop")
    step = await asyncio.to_thread(
        workload.run_step,
        workload.target_of(bench.system),
        seeded,
        p.mixed_rate,
        p.mixed_s,
        bench.tmp / "mixed",
        random.Random(f"{bench.tag}-mixed"),
    )
    bench.doc["mixed_load"] = {**step, "users": p.open_users, "method": workload.method_note()}
