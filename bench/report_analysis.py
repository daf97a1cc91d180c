"""Where the time went and what the figures mean: the py-spy profile section
of docs/benchmarks.md and its "What the numbers say" findings, each sentence
written only when the run measured the figures it cites. Pure like ``report``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .report_format import _table, fmt
from .results import get


def profile_section(doc: Mapping[str, Any]) -> list[str]:
    """The profile section: per service, the share of samples by area and the top self-time functions."""
    d: Mapping[str, Any] = doc.get("details") or {}
    out: list[str] = []
    add = out.append

    prof = d.get("profile") or {}
    add("## Profile (py-spy)")
    add("")
    if prof.get("method"):
        add(str(prof["method"]))
        add("")
    for service, info in (prof.get("services") or {}).items():
        add(f"### {service} ({fmt(info.get('samples'))} samples)")
        add("")
        cats = info.get("categories") or []
        if cats:
            add("Where the samples were (by the module of the innermost frame):")
            add("")
            add(_table(["area", "share of samples"], [[c["name"], f"{c['percent']:.1f} %"] for c in cats]))
            add("")
        top = info.get("top_self") or []
        if top:
            add(_table(["function (self time)", "share"], [[f"`{t['function']}`", f"{t['percent']:.1f} %"] for t in top]))
            add("")
    for finding in prof.get("findings") or []:
        add(f"- {finding}")
    if prof.get("findings"):
        add("")
    return out


def analysis_section(doc: Mapping[str, Any]) -> list[str]:
    """The "What the numbers say" section: the findings of ``_analysis`` as a
    list (no section when there are none)."""
    out: list[str] = []
    add = out.append

    analysis = _analysis(doc)
    if analysis:
        add("## What the numbers say")
        add("")
        out.extend(f"- {a}" for a in analysis)
        add("")
    return out


def _analysis(doc: Mapping[str, Any]) -> list[str]:
    """Data-driven observations (each sentence only when its figures exist)."""
    out: list[str] = []
    d: Mapping[str, Any] = doc.get("details") or {}
    pd = d.get("post_latency") or {}
    running = get(doc, "post_latency_ms.ours.10000.p99")
    stopped = get(pd, "ours_worker_stopped.10000.p99")
    running0 = get(doc, "post_latency_ms.ours.0.p99")
    stopped0 = get(pd, "ours_worker_stopped.0.p99")
    if None not in (running, stopped, running0, stopped0):
        out.append(
            f"Ours' post p99 was {fmt(running0, 0)} ms at 0 followers and {fmt(running, 0)} ms at 10,000 with the "
            f"worker fanning out on the same machine, and {fmt(stopped0, 0)} / {fmt(stopped, 0)} ms with the worker "
            "stopped: what moves the post latency is the fan-out load sharing the node and the CPUs, not the "
            "author's follower count."
        )
    means = {str(b.get("series", "")): b.get("mean_ms") for b in pd.get("breakdown_ms") or []}
    post_stmt = next((v for k, v in means.items() if 'statement="tweet_create_fresh"' in k), None)
    tuning = get(d, "fanout.bare_driver_tuning") or []
    tuned = ""
    if tuning:
        best = max(tuning, key=lambda t: t.get("rows_per_s") or 0)
        if best.get("concurrency", 0) < max(t.get("concurrency", 0) for t in tuning):
            tuned = (
                f" The bare-driver sweep peaked at a window of {best['concurrency']}: a larger one bought no "
                "throughput, only queueing."
            )
    home = next((v for k, v in means.items() if 'statement="home_add"' in k), None)
    if post_stmt is not None and home is not None:
        out.append(
            f"During the measured posts a post's batch (tweet, userline, public line, outbox) averaged "
            f"{fmt(post_stmt, 0)} ms at Cassandra and each fan-out request (a batch of up to 10 rows) "
            f"{fmt(home, 0)} ms: every statement queues behind the fan-out writes in flight and competes with "
            "them for the same cores, which is why tweet-store keeps one fan-out request in flight and paces the "
            "fan-out while it serves posts and reads (`FANLINE_HOME_WRITE_WINDOW_BUSY`, "
            "`FANLINE_HOME_WRITE_BUSY_ROWS_PER_S`) and drains backlogs with its full window only when no one is "
            f"waiting (`FANLINE_HOME_WRITE_WINDOW`).{tuned}"
        )
    sync = get(doc, "post_latency_ms.sync_baseline.10000.p50")
    if sync is not None:
        out.append(
            f"The synchronous baseline needs {fmt(sync / 1000, 1)} s (p50) to answer a post by a "
            "10,000-follower author on this node: the whole fan-out is inside the request."
        )
    worker, bare = get(doc, "fanout_rows_per_s.worker"), get(doc, "fanout_rows_per_s.bare_driver")
    stress_ops = get(doc, "fanout_rows_per_s.cassandra_stress_ops")
    if worker and bare:
        share = 100 * worker / bare
        node = (
            f" cassandra-stress (JVM, 64 threads) got {stress_ops:,.0f} writes/s from the same node, so the limit of "
            "both Python writers is one Python process driving cassandra-driver, not the node."
            if stress_ops and stress_ops > 1.2 * max(worker, bare)
            else ""
        )
        batches = (
            " tweet-store writes the rows as unlogged batches of up to 10 rows whose partitions share their "
            "replica, one request per batch, and so does the bare-driver ceiling (issue 18)."
            if get(d, "fanout.ceiling_batch_rows")
            else " tweet-store writes the rows as unlogged batches of up to 10 rows whose partitions share their "
            "replica, one request per batch; this run's bare-driver loop wrote one row per request, so part "
            "of the worker's margin is that cheaper request shape (issue 18 makes the ceiling batch too)."
        )
        if share >= 70:
            out.append(
                f"One worker process reached {share:.0f} % of the bare-driver loop although every page of rows "
                f"crosses an HTTP hop (worker → tweet-store) with JSON;{batches}{node}"
            )
        else:
            out.append(
                f"One worker process reached {share:.0f} % of the bare-driver loop; the gap is the cost of "
                f"paging followers and sending every page through tweet-store over HTTP with JSON.{node}"
            )
    rd = d.get("timeline_read") or {}
    api_p50, raw_p50 = get(doc, "timeline_read_ms.api.p50"), get(doc, "timeline_read_ms.raw.p50")
    floor_p50, ratio = get(rd, "raw_slice_with_session.p50"), get(rd, "tweet_cache.hit_ratio")
    if None not in (api_p50, raw_p50, floor_p50, ratio):
        out.append(
            f"tweet-store's hydration cache answered {fmt(100 * ratio, 1)} % of the tweets the read phase's pages "
            f"needed, so an API page cost a session lookup and one slice at Cassandra — {fmt(floor_p50, 1)} ms p50 "
            f"from the bare driver — instead of the baseline's slice and 20 reads ({fmt(raw_p50, 1)} ms); the API's "
            f"{fmt(api_p50, 1)} ms p50 is that CQL plus the HTTP hops (client → gateway → social-graph and "
            "tweet-store, in parallel), authentication and JSON."
        )
    sc = doc.get("scaling_rows_per_s") or {}
    one, four = sc.get("1"), sc.get("4")
    ts = get(d, "profile.services.tweet-store") or {}
    if one and four and four < 1.3 * one:
        driver_share = sum(
            c["percent"] for c in ts.get("categories") or [] if c["name"].startswith(("cassandra-driver", "fanline code"))
        )
        extra = (
            f" In the profile, {driver_share:.0f} % of tweet-store's Python time is the driver's per-statement work "
            "and the bridge that submits it (`_Window._submit`)."
            if driver_share
            else ""
        )
        out.append(
            f"Four worker processes wrote {four:,.0f} rows/s against {one:,.0f} for one: every row is "
            "written by the single tweet-store process (one event loop, one driver session, at most "
            "`FANLINE_HOME_WRITE_CALLS` pages at a time) on the same "
            f"{sc.get('cores', '?')} cores, so extra workers only queue more pages in front of it.{extra} "
            "Scaling the fan-out means scaling tweet-store replicas (and cores) along with the workers."
        )
    return out
