"""cassandra-stress against the node: ``stress.run_write`` (single-row
``write``, ``fanout_rows_per_s.cassandra_stress_ops``) and, the fair opponent
of issue 18, ``stress.run_user`` with a user profile of the home-timeline
table written in unlogged batches of ``FANLINE_HOME_WRITE_BATCH_ROWS`` rows
(``fanout_rows_per_s.cassandra_stress_rows``, ``fair.stress_rows_per_s``).
Records ``versions.cassandra_stress``; figures are null with a note when the
tool is unavailable."""

from __future__ import annotations

import asyncio

from .. import stress
from ..common import say
from ..harness import Bench
from .ceiling import batch_rows


async def run(bench: Bench) -> None:
    p = bench.plan
    say(f"cassandra-stress: write n={p.stress_ops:,}, {p.stress_threads} threads")
    fan = bench.details.setdefault("fanout", {})
    try:
        out = await asyncio.to_thread(stress.run_write, bench.infra, bench.stress_keyspace, p.stress_ops, p.stress_threads, say)
    except stress.StressUnavailable as exc:
        fan["stress_note"] = (
            f"`cassandra_stress_ops` is null: {exc}. The bare-driver loop is the ceiling the worker target is judged against."
        )
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
        "process can send."
    )
    say(f"  cassandra-stress: {out['ops_per_s']:,.0f} ops/s")
    rows_per_batch = batch_rows(bench)
    batches = max(1, p.stress_ops // rows_per_batch)
    say(
        f"cassandra-stress user profile: {batches:,} unlogged batches of {rows_per_batch} home-timeline rows, "
        f"{p.stress_threads} threads"
    )
    try:
        user = await asyncio.to_thread(
            stress.run_user,
            bench.infra,
            f"{bench.stress_keyspace}_home",
            rows_per_batch,
            batches,
            p.stress_threads,
            bench.tmp / "stress",
            say,
        )
    except stress.StressUnavailable as exc:
        bench.notes.append(f"cassandra-stress user profile not measured: {exc}")
        return
    bench.doc["fanout_rows_per_s"]["cassandra_stress_rows"] = user["rows_per_s"]
    bench.doc.setdefault("fair", {})["stress_rows_per_s"] = user["rows_per_s"]
    fan["stress_user"] = {
        "args": user["args"],
        "profile": user["profile"],
        "ops_per_s": user["ops_per_s"],
        "output_tail": user["output_tail"],
    }
    say(f"  cassandra-stress user profile: {user['rows_per_s']:,.0f} rows/s")
