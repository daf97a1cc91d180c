"""Sections 5 and 5b of docs/benchmarks.md: the read side. ``GET /v1/timeline``
against its raw CQL, and the live home streams (update latency, the cost of
idle streams, the streams phase's own run, heartbeats and clients). Pure like
``report``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .report_format import _table, fmt


def read_path_section(doc: Mapping[str, Any]) -> list[str]:
    """Section 5: the API's timeline page vs the bare driver's CQL at a fixed rate."""
    d: Mapping[str, Any] = doc.get("details") or {}
    out: list[str] = []
    add = out.append

    add("## 5. Read path: `GET /v1/timeline` vs its raw CQL")
    add("")
    rd = doc.get("timeline_read_ms") or {}
    rdd = d.get("timeline_read") or {}
    api, raw = rd.get("api") or {}, rd.get("raw") or {}
    rows = [
        [
            "`GET /v1/timeline?limit=20` (gateway → social-graph auth → tweet-store)",
            fmt(api.get("p50"), 2),
            fmt(api.get("p99"), 2),
            fmt(rdd.get("api_n")),
        ],
        ["raw CQL: slice + multi-get (bare driver)", fmt(raw.get("p50"), 2), fmt(raw.get("p99"), 2), fmt(rdd.get("raw_n"))],
    ]
    extra = rdd.get("raw_with_session") or {}
    if extra:
        rows.append(
            [
                "raw CQL incl. the session lookup the gateway also does",
                fmt(extra.get("p50"), 2),
                fmt(extra.get("p99"), 2),
                fmt(extra.get("n")),
            ]
        )
    floor = rdd.get("raw_slice_with_session") or {}
    if floor:
        rows.append(
            [
                "raw CQL of a fully cached page: session lookup + slice only",
                fmt(floor.get("p50"), 2),
                fmt(floor.get("p99"), 2),
                fmt(floor.get("n")),
            ]
        )
    add(_table(["path", "p50 (ms)", "p99 (ms)", "requests"], rows))
    add("")
    add(f"All at a fixed open-loop rate of **{fmt(rd.get('rate_per_s'), 0)} requests/s**.")
    cache = rdd.get("tweet_cache") or {}
    if cache.get("hit_ratio") is not None:
        add(
            f"tweet-store's hydration cache answered {fmt(100 * cache['hit_ratio'], 1)} % of the API side's tweet "
            f"lookups ({fmt(cache.get('hits'))} hits, {fmt(cache.get('misses'))} misses)."
        )
    if rdd.get("method"):
        add(str(rdd["method"]))
    add("")
    return out


def streams_section(doc: Mapping[str, Any]) -> list[str]:
    """Section 5b: the live streams phase."""
    d: Mapping[str, Any] = doc.get("details") or {}
    out: list[str] = []
    add = out.append

    add("## 5b. Live streams: update latency and the cost of idle streams")
    add("")
    st = doc.get("streams") or {}
    sd = d.get("streams") or {}
    lat = st.get("update_latency_ms") or {}
    deliveries = sd.get("deliveries") or {}
    add(
        _table(
            [
                "home streams",
                "posts/s",
                "update p50 (ms)",
                "update p99 (ms)",
                "deliveries (received / expected)",
                "KiB per idle stream",
                "CPU of idle heartbeats (% of a core)",
            ],
            [
                [
                    fmt(st.get("streams")),
                    fmt(st.get("rate_per_s"), 1),
                    fmt(lat.get("p50"), 0),
                    fmt(lat.get("p99"), 0),
                    f"{fmt(deliveries.get('received'))} / {fmt(deliveries.get('expected'))}",
                    fmt(st.get("kib_per_idle_stream"), 1),
                    fmt(st.get("idle_heartbeat_cpu_percent"), 2),
                ]
            ],
        )
    )
    add("")
    add(_streams_notes(sd))
    for key in ("not_measured", "method"):
        if sd.get(key):
            add(str(sd[key]))
            add("")
    return out


def _streams_notes(sd: dict[str, Any]) -> str:
    """The streams phase's own run, heartbeats and clients, in sentences
    (each only when its figures exist); ends with a blank line if not empty."""
    out = []
    run = sd.get("run") or {}
    if run:
        load = run.get("load_average_1m") or {}
        cores = run.get("cores") or 0
        shared = (
            " **The machine was shared** (load above its cores), so the CPU-bound figures — latency and CPU "
            "shares — carry other jobs' noise; the memory figure does not."
            if max(load.get("start") or 0, load.get("end") or 0) > cores
            else ""
        )
        out.append(
            f"Measured {run.get('started_at', '—')} by `{run.get('command', '—')}`; 1-minute load average "
            f"{fmt(load.get('start'), 2)} at the start and {fmt(load.get('end'), 2)} at the end on {cores} "
            f"cores.{shared}"
        )
    hb = sd.get("heartbeats") or {}
    if hb:
        out.append(
            f"Heartbeats in the idle window: {fmt(hb.get('received_in_idle_window'))} arrived "
            f"({fmt(hb.get('expected_in_idle_window'))} expected), the longest wait for one on any stream "
            f"{fmt(hb.get('longest_wait_s'), 2)} s; the gateway's CPU per heartbeat "
            f"{fmt(hb.get('gateway_cpu_us_per_heartbeat'), 1)} µs."
        )
    cl = sd.get("clients") or {}
    if cl:
        cpu = cl.get("cpu_per_s") or {}
        lags = [lag.get("max") for lag in cl.get("loop_lag_ms") or [] if lag.get("max") is not None]
        pct = {k: None if v is None else 100 * v for k, v in cpu.items()}
        out.append(
            f"The clients ({fmt(cl.get('processes'))} processes) used {fmt(pct.get('idle'), 1)} % of a core "
            f"while idle and {fmt(pct.get('posting'), 1)} % while the posts arrived; their event loops woke "
            f"at most {fmt(max(lags) if lags else None, 0)} ms late, and "
            f"{fmt(cl.get('streams_ended_early'))} streams ended early."
        )
    return " ".join(out) + "\n" if out else ""
