"""The open-loop scenarios (``bench.openloop``): ``mixed``, ``route_cost``, ``saturation``,
``overload``, ``mixed_embedded``, ``baseline_ref`` and ``paired_cost`` (docs/benchmark-methods.md)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fanline_shared import cassandra as cql

from .. import openloop
from ..context import REPO, Ctx, delete_topics, say, with_engines
from ..openloop import MIX, Target
from ..system import BenchSystem, CliSystem, checkout

Mix = dict[str, float]
Step = tuple[dict[str, Any], float | None]


async def settle(ctx: Ctx, scenario: str, timeout_s: float = 600.0) -> None:
    """Until no compaction runs or waits for three polls in a row (at most ``timeout_s``)."""
    query = "SELECT active_tasks, pending_tasks FROM system_views.thread_pools WHERE name = 'CompactionExecutor'"
    started, quiet, first = time.monotonic(), 0, None
    while quiet < 3 and time.monotonic() - started < timeout_s:
        pools = await cql.execute(ctx.session, query, name="bench_compactions")
        tasks = sum(int(r.active_tasks or 0) + int(r.pending_tasks or 0) for r in pools)
        first, quiet = tasks if first is None else first, quiet + 1 if tasks == 0 else 0
        await asyncio.sleep(2 if quiet < 3 else 0)
    ctx.rec.add(scenario, "compaction_wait_s", time.monotonic() - started)
    ctx.rec.add(scenario, "compactions_at_start", first)


async def quiet(ctx: Ctx, scenario: str) -> None:
    """Idle workers (every queued event delivered), then ``settle``: the start of a scenario
    that follows one leaving a backlog behind."""
    await asyncio.to_thread(openloop.drain_workers, ctx.system.metrics_urls(), 600.0)
    await settle(ctx, scenario)


async def population(ctx: Ctx) -> openloop.Population:
    """The real-engine population, seeded once by the first open-loop scenario."""
    if ctx.population is None:
        p = ctx.params["open_loop"]
        say(f"open loop: seeding {p['users']} users (Zipf-like follows, mean {p['mean_following']})")
        ctx.population = await openloop.seed(ctx.api, f"o{ctx.tag}", p["users"], p["mean_following"], random.Random(ctx.tag))
    assert isinstance(ctx.population, openloop.Population)
    return ctx.population


async def step(
    ctx: Ctx, scenario: str, rate: float, seconds: float, target: Target | None = None, mix: Mix = MIX, /, **labels: object
) -> Step:
    """One open-loop step on ``target`` (default: the system under test and its population)."""
    say(f"{scenario}: {rate:g} requests/s for {seconds:g} s" + "".join(f", {k} {v}" for k, v in labels.items()))
    target = target or Target(ctx.api, ctx.system.metrics_urls, with_engines(ctx, ctx.system.pids), await population(ctx))
    return await asyncio.to_thread(openloop.run_step, ctx.rec.scope(scenario, **labels), target, rate, seconds, mix)


async def mixed(ctx: Ctx, p: dict[str, Any]) -> None:
    await population(ctx)
    await settle(ctx, "mixed")
    if p.get("idle_s"):  # first: what the system costs with no requests, against the same rate
        say(f"mixed: idle for {p['idle_s']:g} s")
        target = Target(ctx.api, ctx.system.metrics_urls, with_engines(ctx, ctx.system.pids), await population(ctx))
        await asyncio.to_thread(openloop.idle, ctx.rec.scope("mixed"), target, p["idle_s"], p["rate"])
    await step(ctx, "mixed", p["rate"], p["duration_s"])


async def route_cost(ctx: Ctx, p: dict[str, Any]) -> None:
    for route in p["routes"]:
        await step(ctx, "route_cost", p["rate"], p["duration_s"], None, {route: 1.0}, alone=route)


async def curve(ctx: Ctx, scenario: str, p: dict[str, Any], target: Target | None = None, /, **labels: object) -> float | None:
    """Rising rates until one does not hold, then ``refine`` bisections (geometric) between the
    last rate that held and the first that did not: records each step and the capacity (returned)."""

    async def holds(rate: float) -> bool:
        summary, lag = await step(ctx, scenario, rate, p["step_s"], target, rate=rate, **labels)
        held, why = openloop.held(summary, lag, rate)
        ctx.rec.add(scenario, "verdict", why, rate=rate, **labels)
        return held

    capacity: float | None = None
    failed: float | None = None
    for rate in openloop.rates(p["start"], p["factor"], p["steps"]):
        if not await holds(rate):
            failed = rate
            break
        capacity = rate
    # Each step starts once the previous one's backlog is delivered (run_step), so a step below
    # an overloaded one starts from an idle system.
    for _ in range(p.get("refine", 0)):
        if capacity is None or failed is None:
            break
        rate = openloop.between(capacity, failed)
        if await holds(rate):
            capacity = rate
        else:
            failed = rate
    ctx.rec.add(scenario, "capacity_per_s", capacity, **labels)
    at_capacity = ctx.lookup(scenario, "accepted_ms", route="all", stat="p99", rate=capacity, **labels) if capacity else None
    ctx.rec.add(scenario, "capacity_accepted_p99_ms", at_capacity, **labels)
    return capacity


async def saturation(ctx: Ctx, p: dict[str, Any]) -> None:
    await population(ctx)
    await settle(ctx, "saturation")
    await curve(ctx, "saturation", p)


async def overload(ctx: Ctx, p: dict[str, Any]) -> None:
    await population(ctx)
    await settle(ctx, "overload")
    if (capacity := ctx.lookup("saturation", "capacity_per_s")) is None:
        capacity = ctx.params["mixed"]["rate"]
        ctx.rec.scope("overload").note(f"no measured capacity: ran at 2 × the mixed rate, {2 * capacity:g}/s")
    ctx.rec.add("overload", "capacity_per_s", capacity)
    await step(ctx, "overload", 2 * capacity, p["duration_s"])


async def mixed_embedded(ctx: Ctx, p: dict[str, Any]) -> None:
    # It follows overload, whose backlog the engine-backed system is still delivering: measured
    # beside that (load 7.8 on 2 cores, 2026-11-28), the same embedded load cost 9.2 CPU-s per
    # 1,000 requests instead of 6.3. Start from idle workers and no compaction.
    if ctx.system.core_running():
        await quiet(ctx, "mixed_embedded")
    # make run's default, then (``layouts``) the same with the stores in the gateway's process
    # (make run --colocate), each on a fresh data directory, labelled by layout beyond the default
    for layout in p.get("layouts", ["default"]):
        colocate, data = layout == "colocated", ctx.tmp / f"embedded-{layout}"
        system = BenchSystem(data, ctx.args.base_port + 200, extra_env=p["env"], log_dir=ctx.logs / "embedded", colocate=colocate)
        say(f"embedded {layout}: SQLite + tansu on ports {system.base_port}+")
        await asyncio.to_thread(system.start, 120)
        try:
            following = min(ctx.params["open_loop"]["mean_following"], p["users"] // 4)
            pop = await openloop.seed(system.url("api"), f"e{ctx.tag}{layout[0]}", p["users"], following, random.Random(ctx.tag))
            target = Target(system.url("api"), system.metrics_urls, system.pids, pop)
            labels = {"layout": layout} if colocate else {}
            if p.get("idle_s"):  # what the processes cost with no requests, against the same rate
                say(f"embedded {layout}: idle for {p['idle_s']:g} s")
                scope = ctx.rec.scope("mixed_embedded", **labels)
                await asyncio.to_thread(openloop.idle, scope, target, p["idle_s"], p["rate"])
            await step(ctx, "mixed_embedded", p["rate"], p["duration_s"], target, MIX, **labels)
        finally:
            await asyncio.to_thread(system.stop)


async def baseline_ref(ctx: Ctx, p: dict[str, Any]) -> None:
    """This checkout and ``--baseline-ref``, each started fresh through its own launcher with
    a population of its own, in ``rounds`` rounds of alternating order."""
    if not ctx.args.baseline_ref:
        ctx.rec.add("baseline_ref", "not_measured", "not measured: run with --baseline-ref <git ref>")
        return
    root, sha = await asyncio.to_thread(checkout, ctx.args.baseline_ref, say)
    ctx.rec.add("baseline_ref", "ref", sha)
    await asyncio.to_thread(ctx.system.stop)  # the systems compared run alone on the engines
    sides = {"current": REPO, sha[:7]: root}
    capacities: dict[str, list[float | None]] = {name: [] for name in sides}
    for r in range(p["rounds"]):
        for k, name in enumerate(list(sides) if r % 2 == 0 else list(sides)[::-1]):
            side = f"{ctx.tag}{'c' if name == 'current' else 'b'}{r}"
            say(f"baseline ref: round {r + 1}, {name} ({sides[name]})")
            # --colocate is this checkout's layout only: a ref from before it has no such flag.
            colocate = ctx.args.colocate and name == "current"
            async with started(ctx, sides[name], side, 300 + 10 * k, p, colocate=colocate, engines=True) as target:
                capacities[name].append(await curve(ctx, "baseline_ref", p, target, system=name, round=r + 1))
    ctx.rec.scope("baseline_ref").repeated("capacity_ratio", capacities["current"], capacities[sha[:7]])


async def paired_cost(ctx: Ctx, p: dict[str, Any]) -> None:
    """This checkout and a git ref (``ref``, else ``--baseline-ref``) under load at once: the
    same mix at the same rate to each, from populations of the same shape, the two load windows
    begun together. Each system's own processes' CPU per 1,000 requests, and their ratio round
    by round: both share the machine's state of the moment, which moves the cost of one system
    between runs by more than most code changes (docs/benchmark-methods.md, "paired_cost").
    Each round starts both systems fresh, and the two swap their slot (which starts and seeds
    first, which ports) from one round to the next: with the slots fixed, the same commit on
    both sides measured 1.10, 1.05 and 1.06."""
    ref = p["ref"] or ctx.args.baseline_ref
    if not ref:
        ctx.rec.add(
            "paired_cost", "not_measured", "not measured: run with --baseline-ref <git ref> or --set paired_cost.ref=<git ref>"
        )
        return
    root, sha = await asyncio.to_thread(checkout, ref, say)
    ctx.rec.add("paired_cost", "ref", sha)
    await asyncio.to_thread(ctx.system.stop)  # the two systems share the engines with nothing else
    # The ref's layout is this checkout's where the ref has it (a ref from before --colocate has not).
    launcher = "".join(f.read_text() for f in (root / "deploy" / "local").glob("system*.py"))
    layout = {"current": ctx.args.colocate, "ref": ctx.args.colocate and '"--colocate"' in launcher}
    named = {True: "colocated", False: "a process per service"}
    ctx.rec.add("paired_cost", "layouts", f"{named[layout['current']]} / {named[layout['ref']]}")
    roots = {"current": REPO, "ref": root}
    costs: dict[str, list[float | None]] = {"current": [], "ref": []}
    for r in range(p["rounds"]):
        first, second = ("current", "ref") if r % 2 == 0 else ("ref", "current")
        say(f"paired cost: round {r + 1}, {first} first; this checkout and {sha[:7]} at {p['rate']:g}/s each")
        sides: dict[str, Target] = {}
        # Their Fanline processes only (engines=False): the engines serve both at once.
        async with (
            started(ctx, roots[first], f"{ctx.tag}p{r}a", 400, p, colocate=layout[first], engines=False) as sides[first],
            started(ctx, roots[second], f"{ctx.tag}p{r}b", 410, p, colocate=layout[second], engines=False) as sides[second],
        ):
            together = threading.Barrier(2)
            await asyncio.gather(
                *(
                    asyncio.to_thread(
                        openloop.run_step,
                        ctx.rec.scope("paired_cost", system=name, round=r + 1),
                        target,
                        p["rate"],
                        p["duration_s"],
                        MIX,
                        together,
                    )
                    for name, target in sides.items()
                )
            )
        ctx.rec.add("paired_cost", "first", first, round=r + 1)
        for name in costs:
            costs[name].append(ctx.lookup("paired_cost", "cpu_s_per_1k", process="fanline", system=name, round=r + 1))
    ctx.rec.scope("paired_cost").repeated("cost_ratio", costs["current"], costs["ref"])


@contextlib.asynccontextmanager
async def started(
    ctx: Ctx, root: Path, side: str, port_offset: int, p: dict[str, Any], *, colocate: bool, engines: bool
) -> AsyncIterator[Target]:
    """The system of the checkout ``root`` started fresh on the engines as ``side`` (its own
    keyspaces and topics, dropped afterwards unless ``--keep``) with a population of its own
    (``p``'s ``users`` and ``mean_following``), as a load target whose CPU is that of its
    processes (and the engines', with ``engines``); stopped at the end."""
    env = ctx.system_env(side) | dict(item.split("=", 1) for item in ctx.args.env)
    port, log = ctx.args.base_port + port_offset, ctx.logs / f"ref-{side}.log"
    system = CliSystem(root, port, env, log, ctx.args.fanout_replica, ctx.args.background_nice, colocate)
    await asyncio.to_thread(system.start, ctx.tmp / f"ref-{side}")
    try:
        pop = await openloop.seed(system.api, f"q{side}", p["users"], p["mean_following"], random.Random(ctx.tag))
        # the seeding's last tweets were published a moment ago: delivered before the first step
        await asyncio.to_thread(openloop.drain_workers, system.metrics_urls(), 120.0, 60.0, openloop.LAG_REPORT_S + 1)
        yield Target(system.api, system.metrics_urls, with_engines(ctx, system.pids) if engines else system.pids, pop)
    finally:
        await asyncio.to_thread(system.stop)
        if not ctx.args.keep:
            for ks in ("social_graph", "tweet_store"):
                await cql.execute(ctx.session, f"DROP KEYSPACE IF EXISTS bench_{side}_{ks}", name="bench_drop")
            await delete_topics(ctx.infra.kafka_bootstrap, ctx.topic_prefixes(side))
