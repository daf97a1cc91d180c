"""``cost_floor``: the standard mix, at ``mixed``'s rate, against the leanest Python we could
write on the same driver and broker client (``bench.bare_mix``), on the same engines: the
floor under ``cost_fanline`` (issue 31, docs/benchmark-methods.md)."""

from __future__ import annotations

import asyncio
import random
import sys
import time
from typing import Any

from fanline_shared import cassandra as cql
from fanline_shared.domain import new_timeuuid, utcnow

from .. import bare_mix, openloop
from ..context import REPO, Ctx, delete_topics, say, stop_process, with_engines
from ..openloop import MIX, Population, Target
from ..rows import Results
from ..system import spawn, wait_ready
from .open_loop import settle


async def seed(session: Any, st: bare_mix.Statements, pop: Population, tokens: dict[str, str]) -> None:
    """The population written straight into the bare keyspace: users (one argon2 hash of the
    open loop's password), sessions, the follow graph (both ways, active, counted) and two
    tweets each in every follower's home timeline, as ``openloop.seed`` leaves Fanline."""
    digest = await asyncio.to_thread(bare_mix.hasher().hash, openloop.PASSWORD)
    now = utcnow()
    writes: list[tuple[Any, tuple[Any, ...]]] = []
    followers: dict[str, list[str]] = {u.lower(): [] for u in pop.follows}
    for user, following in pop.follows.items():
        a = user.lower()
        writes += [(st.user_new, (a, user, digest)), (st.session_new, (tokens[user], user))]
        for other in following:
            b = other.lower()
            followers[b].append(a)
            writes += [(st.follow, (a, b, now)), (st.follower, (b, a, now)), (st.active, (b, a))]
            writes += [(st.bump_followers, (1, b)), (st.bump_following, (1, a))]
    for user in pop.follows:
        for i in range(2):
            tid, a = new_timeuuid(), user.lower()
            writes += [(st.tweet, (tid, user, f"tweet {i}")), (st.userline_add, (a, tid))]
            writes += [(st.home_add, (o, tid, a)) for o in [a, *followers[a]]]
    await cql.execute_each(session, [s.bind(p) for s, p in writes], name="bench_bare_seed", concurrency=64)


async def cost_floor(ctx: Ctx, p: dict[str, Any]) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    s, rate = ctx.rec.scope("cost_floor"), ctx.params["mixed"]["rate"]
    topic = f"bench.{ctx.tag}.bare"
    env = ctx.system.env() | {"BARE_TOPIC": topic}
    ks = bare_mix.keyspace(env)
    await ks.start()
    procs: dict[str, Any] = {}
    try:
        st = await asyncio.to_thread(bare_mix.Statements, ks.session, ks.name)
        rng = random.Random(ctx.tag)
        follows = openloop.zipf_follows(f"f{ctx.tag}", p["users"], p["mean_following"], rng)
        tokens = {u: f"{u}.bare-floor-token-{k:06d}" for k, u in enumerate(follows)}
        pop = Population(follows, tokens)
        say(f"cost floor: seeding {len(follows)} users straight into {ks.name}")
        await seed(ks.session, st, pop, tokens)
        admin = AIOKafkaAdminClient(bootstrap_servers=ctx.infra.kafka_bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, num_partitions=p["partitions"], replication_factor=1)])
        finally:
            await admin.close()
        port = ctx.args.base_port + p["port_offset"]
        for role, argv in (("bare-gateway", ["gateway", str(port)]), ("bare-worker", ["worker"])):
            procs[role] = spawn([sys.executable, "-m", "bench.bare_mix", *argv], ctx.logs / f"{role}.log", env, cwd=REPO)
        await asyncio.to_thread(wait_ready, f"http://127.0.0.1:{port}/healthz", procs["bare-gateway"], 60, "the bare gateway")
        log, deadline = ctx.logs / "bare-worker.log", time.monotonic() + 60
        while "ready" not in log.read_text(errors="replace"):
            if procs["bare-worker"].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the bare worker did not start (see {log})")
            await asyncio.sleep(0.2)
        await settle(ctx, "cost_floor")
        pids = {role: proc.pid for role, proc in procs.items()}
        target = Target(f"http://127.0.0.1:{port}", dict, with_engines(ctx, lambda: pids), pop)
        say(f"cost floor: the standard mix at {rate:g}/s for {p['duration_s']:g} s against the bare processes")
        summary, _ = await asyncio.to_thread(openloop.run_step, s, target, rate, p["duration_s"], MIX)
        if (floor := ctx.lookup("cost_floor", "cpu_s_per_1k", process="fanline")) is not None:
            ours = Results(ctx.rec.rows).num("mixed", "cpu_s_per_1k", process="fanline")  # this run's only
            s("fanline_vs_floor", None if ours is None else ours / floor, "")
            say(f"cost floor: {floor:.2f} CPU-s per 1,000 requests" + (f"; Fanline's mixed {ours:.2f}" if ours else ""))
        if bad := {k: v["errors"] for k, v in summary.items() if v["errors"]}:
            s.note(f"errors by route: {bad}")
    finally:
        for proc in procs.values():
            stop_process(proc)
        if not ctx.args.keep:
            await cql.execute(ctx.session, f"DROP KEYSPACE IF EXISTS {ks.name}", name="bench_drop")
            await delete_topics(ctx.infra.kafka_bootstrap, (topic,))
        await ks.close()
