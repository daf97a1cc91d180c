"""Overload (issue 18 item 4): the mixed workload at twice the saturation
phase's capacity for ``plan.overload_s``. The system must shed, not queue:
the p99 of the requests it accepts stays <= 2 x its p99 at capacity, and
every refused request (``503`` + ``Retry-After``, admission control) is
answered within 100 ms. Records ``overload`` with the client's figures
beside the services' own (the gateway's latency histogram, each service's
sheds and queue waits). Needs ``saturation`` first; without a capacity it
runs at twice ``plan.mixed_rate`` and says so."""

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
    bench.details.setdefault("compactions_settled", {})["overload"] = await quiesce.settle_compactions(bench.session, "overload")
    sat = bench.doc.get("saturation") or {}
    capacity = sat.get("capacity_per_s")
    if capacity is None:
        capacity = p.mixed_rate
        bench.notes.append(
            f"overload: no measured capacity (saturation not run or no step held); ran at 2 x the mixed rate, {2 * capacity:g}/s"
        )
    rate = 2 * float(capacity)
    say(f"overload: {rate:g} requests/s (2 x capacity {capacity:g}/s) for {p.overload_s:g}s")
    step = await asyncio.to_thread(
        workload.run_step,
        workload.target_of(bench.system),
        seeded,
        rate,
        p.overload_s,
        bench.tmp / "overload",
        random.Random(f"{bench.tag}-overload"),
    )
    total = step["client"]["total"]
    bench.doc["overload"] = {
        **step,
        "capacity_per_s": capacity,
        "capacity_accepted_p99_ms": sat.get("capacity_accepted_p99_ms"),
        "accepted_p99_ms": total["accepted_ms"]["p99"],
        "refused": total["refused"],
        "refused_max_ms": total["refused_ms"]["max"],
        "refused_without_retry_after": total["refused_without_retry_after"],
        "errors": total["errors"],
        "method": workload.method_note(),
    }
