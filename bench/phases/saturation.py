"""Saturation curve (issue 18 item 3): the mixed workload at rising rates
(``plan.sat_start`` x ``plan.sat_factor``^i, ``plan.sat_step_s`` each) until
a step does not hold — post p99 > 100 ms, delivery lag p99 > 2 s, more than
1 % refused or failed, or the generator below 90 % of the offered rate
(``openloop.step_held``). Records ``saturation``: every step and
``capacity_per_s``, the highest rate that held (the system's capacity on
this machine); docs/benchmarks.md plots it."""

from __future__ import annotations

import asyncio
import random

from .. import openloop, quiesce, workload
from ..common import say
from ..harness import Bench


async def run(bench: Bench) -> None:
    p = bench.plan
    assert bench.system is not None
    seeded = await workload.seeded(bench)
    bench.details.setdefault("compactions_settled", {})["saturation"] = await quiesce.settle_compactions(
        bench.session, "saturation"
    )
    target = workload.target_of(bench.system)
    rates = openloop.saturation_rates(p.sat_start, p.sat_factor, p.sat_steps)
    say(f"saturation: {', '.join(f'{r:g}' for r in rates)} requests/s, {p.sat_step_s:g}s each, until one does not hold")
    steps = []
    for rate in rates:
        step = await asyncio.to_thread(
            workload.run_step,
            target,
            seeded,
            rate,
            p.sat_step_s,
            bench.tmp / "saturation",
            random.Random(f"{bench.tag}-sat-{rate}"),
        )
        held, why = openloop.step_held(step["client"], step["delivery_lag_ms"]["p99"], rate)
        steps.append({**step, "held": held, "verdict": why})
        say(f"  {rate:g}/s: {why}")
        if not held:
            break
    cap = openloop.capacity(steps)
    at_cap = next((s for s in steps if s["rate_per_s"] == cap), None)
    bench.doc["saturation"] = {
        "capacity_per_s": cap,
        "capacity_accepted_p99_ms": at_cap["client"]["total"]["accepted_ms"]["p99"] if at_cap else None,
        "capacity_post_p99_ms": (at_cap["client"]["routes"].get("post") or {}).get("accepted_ms", {}).get("p99")
        if at_cap
        else None,
        "steps": steps,
        "bounds": {"post_p99_ms": openloop.POST_P99_BOUND_MS, "lag_p99_ms": openloop.LAG_P99_BOUND_MS},
        "method": workload.method_note(),
    }
    say(f"saturation: capacity {cap}/s")
