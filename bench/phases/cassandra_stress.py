"""cassandra-stress against the node (``stress.run_write``): records
``fanout_rows_per_s.cassandra_stress_ops`` and ``versions.cassandra_stress``,
both null with a note when the tool is unavailable."""

from __future__ import annotations

import asyncio

from .. import stress
from ..common import say
from ..harness import Bench


async def run(bench: Bench) -> None:
    p = bench.plan
    say(f"cassandra-stress: write n={p.stress_ops:,}, {p.stress_threads} threads")
    fan = bench.details.setdefault("fanout", {})
    try:
        out = await asyncio.to_thread(stress.run_write, bench.infra, bench.stress_keyspace, p.stress_ops,
                                      p.stress_threads, say)
    except stress.StressUnavailable as exc:
        fan["stress_note"] = (f"`cassandra_stress_ops` is null: {exc}. The bare-driver loop is the ceiling the "
                              "worker target is judged against.")
        bench.notes.append(f"cassandra-stress not measured: {exc}")
        bench.doc["versions"]["cassandra_stress"] = None
        return
    bench.doc["fanout_rows_per_s"]["cassandra_stress_ops"] = out["ops_per_s"]
    bench.doc["versions"]["cassandra_stress"] = out["tool"]
    fan["stress"] = {"args": out["args"], "output_tail": out["output_tail"]}
    fan["stress_note"] = (
        f"cassandra-stress: `{out['args']}` — {out['tool']}. Apache publishes no `cassandra-stress` artifact to "
        "Maven Central and no 5.0 binary tarball there (the newest `org.apache.cassandra:apache-cassandra:*:bin` "
        "tarball is 4.0-alpha2), so the 4.0-alpha2 tool, with its own libraries, drives the 5.0 node over the "
        "native protocol. Its rows (one 32-byte column, 10-byte key) are about the size of a home-timeline row; "
        "it runs on the JVM with 64 client threads, so it shows what the node can take, not what one Python "
        "process can send.")
    say(f"  cassandra-stress: {out['ops_per_s']:,.0f} ops/s")
