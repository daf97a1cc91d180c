"""Section 9 of docs/benchmarks.md and its plot (issue 18): the open-loop
mixed workload, its saturation curve, the overload run and the embedded
default. Pure like ``report``; the plot takes matplotlib's ``pyplot`` and
``report_plots``'s ``save``. The saturation curve is also drawn in text
(``ascii_curve``) so the page shows it without the image."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .openloop import ROUTES
from .report_format import _table, fmt


def _route_rows(step: Mapping[str, Any]) -> list[list[str]]:
    client = (step.get("client") or {}).get("routes") or {}
    server = ((step.get("server") or {}).get("gateway_route_ms")) or {}
    rows = []
    for route in ROUTES:
        c = client.get(route)
        if not c:
            continue
        s = server.get(route) or {}
        rows.append(
            [
                route.replace("_", "-"),
                fmt(c["requests"]),
                fmt(c["accepted_ms"]["p50"], 1),
                fmt(c["accepted_ms"]["p99"], 1),
                fmt(s.get("p50"), 1),
                fmt(s.get("p99"), 1),
                fmt(c["refused"]),
                fmt(c["errors"]),
            ]
        )
    return rows


ROUTE_HEADER = [
    "route",
    "requests",
    "client p50 (ms)",
    "client p99 (ms)",
    "gateway p50 (ms)",
    "gateway p99 (ms)",
    "refused (503)",
    "errors",
]


def _cpu(step: Mapping[str, Any]) -> str:
    cpu = step.get("cpu_s_per_1k_requests") or {}
    parts = [f"{name} {value:.2f}" for name, value in cpu.items() if name != "total"]
    gen = step.get("generator") or {}
    return (
        f"CPU-seconds per 1,000 requests: {', '.join(parts) or '—'} (Fanline total **{fmt(cpu.get('total'), 2)}**); "
        f"the generator ({gen.get('tool', 'vegeta')}) used {fmt(gen.get('cpu_s'), 1)} CPU-s in all, "
        f"{fmt(gen.get('cpu_s_per_1k_requests'), 3)} per 1,000 requests."
    )


def _step_block(title: str, step: Mapping[str, Any]) -> list[str]:
    total = (step.get("client") or {}).get("total") or {}
    lag = step.get("delivery_lag_ms") or {}
    return [
        f"**{title}**: offered **{fmt(step.get('rate_per_s'), 0)}/s** for {fmt(step.get('duration_s'), 0)} s, "
        f"achieved **{fmt(step.get('achieved_rate_per_s'), 1)}/s**; {fmt(total.get('accepted'))} accepted, "
        f"{fmt(total.get('refused'))} refused, {fmt(total.get('errors'))} errors; delivery lag p50 "
        f"{fmt(lag.get('p50'), 0)} ms, p99 **{fmt(lag.get('p99'), 0)} ms** ({fmt(lag.get('tweets'))} tweets).",
        "",
        _table(ROUTE_HEADER, _route_rows(step)),
        "",
        _cpu(step),
        "",
    ]


def ascii_curve(steps: Sequence[Mapping[str, Any]], width: int = 40) -> list[str]:
    """Post p99 and lag p99 per offered rate, as text bars (capped at 4 x the bound)."""
    lines = ["offered/s  achieved/s  post p99 (ms; | = 100 ms bound)              lag p99 (ms)  held"]
    for s in steps:
        routes = (s.get("client") or {}).get("routes") or {}
        post = ((routes.get("post") or {}).get("accepted_ms") or {}).get("p99")
        lag = (s.get("delivery_lag_ms") or {}).get("p99")
        bar = ""
        if post is not None:
            cells = min(width, round(post / 400 * width))
            bar = "".join("|" if i == width // 4 else ("#" if i < cells else " ") for i in range(width))
        lines.append(
            f"{fmt(s.get('rate_per_s'), 0):>9}  {fmt(s.get('achieved_rate_per_s'), 0):>10}  "
            f"{bar:<{width}} {fmt(post, 0):>5}  {fmt(lag, 0):>12}  {'yes' if s.get('held') else 'no'}"
        )
    return ["```", *lines, "```"]


def openloop_section(doc: Mapping[str, Any], plots: Mapping[str, str]) -> list[str]:
    """Section 9, from ``mixed_load``, ``saturation``, ``overload`` and ``mixed_embedded``."""
    out = ["## 9. Open-loop mixed load, saturation and overload", ""]
    mixed: Mapping[str, Any] = doc.get("mixed_load") or {}
    sat: Mapping[str, Any] = doc.get("saturation") or {}
    over: Mapping[str, Any] = doc.get("overload") or {}
    emb: Mapping[str, Any] = doc.get("mixed_embedded") or {}
    if not any(x.get("client") or x.get("steps") for x in (mixed, sat, over, emb)):
        return [*out, "Not measured in this run.", ""]
    method = next((x.get("method") for x in (mixed, sat, over, emb) if x.get("method")), None)
    if method:
        out += [method, ""]
    settled: Mapping[str, Any] = (doc.get("details") or {}).get("compactions_settled") or {}
    if settled:
        out += [
            "Each of these phases started once Cassandra had no compaction running or queued "
            "(`system_views.thread_pools`; earlier phases leave tens of millions of rows to compact): "
            + "; ".join(
                f"{name} waited {fmt(s.get('waited_s'), 0)} s ({fmt(s.get('tasks_at_start'))} at first"
                + ("" if s.get("settled") else ", **still compacting** at the timeout")
                + ")"
                for name, s in settled.items()
            )
            + ".",
            "",
        ]
    if mixed.get("client"):
        out += ["### Steady mixed load (real Cassandra + Kafka)", "", *_step_block(f"{fmt(mixed.get('users'))} users", mixed)]
    steps = sat.get("steps") or []
    if steps:
        out += [
            "### Saturation curve",
            "",
            f"Rates rise step by step until post p99 > 100 ms, delivery lag p99 > 2 s, more than 1 % of requests "
            f"refused or failed, or the generator achieved less than 90 % of the offered rate. **Capacity on this "
            f"machine: {fmt(sat.get('capacity_per_s'), 0)} requests/s** (accepted p99 there "
            f"{fmt(sat.get('capacity_accepted_p99_ms'), 1)} ms).",
            "",
        ]
        if plots.get("saturation"):
            out += [f"![saturation curve]({plots['saturation']})", ""]
        out += ascii_curve(steps)
        out += [
            "",
            _table(
                [
                    "offered/s",
                    "achieved/s",
                    "accepted p99 (ms)",
                    "post p99 (ms)",
                    "lag p99 (ms)",
                    "refused",
                    "errors",
                    "Fanline CPU-s / 1k",
                    "verdict",
                ],
                [
                    [
                        fmt(s.get("rate_per_s"), 0),
                        fmt(s.get("achieved_rate_per_s"), 1),
                        fmt(((s.get("client") or {}).get("total") or {}).get("accepted_ms", {}).get("p99"), 1),
                        fmt(
                            (((s.get("client") or {}).get("routes") or {}).get("post") or {}).get("accepted_ms", {}).get("p99"), 1
                        ),
                        fmt((s.get("delivery_lag_ms") or {}).get("p99"), 0),
                        fmt(((s.get("client") or {}).get("total") or {}).get("refused")),
                        fmt(((s.get("client") or {}).get("total") or {}).get("errors")),
                        fmt((s.get("cpu_s_per_1k_requests") or {}).get("total"), 2),
                        str(s.get("verdict", "")),
                    ]
                    for s in steps
                ],
            ),
            "",
        ]
    if over.get("client"):
        adm = ((over.get("server") or {}).get("admission")) or {}
        shed = ", ".join(
            f"{svc} {fmt(a.get('shed'))} (admitted requests' queue wait p99 {fmt(a.get('queue_wait_p99_ms'), 1)} ms)"
            for svc, a in adm.items()
        )
        out += [
            "### Overload: twice the capacity",
            "",
            f"At {fmt(over.get('rate_per_s'), 0)} requests/s (2 × {fmt(over.get('capacity_per_s'), 0)}/s) the "
            f"system must shed, not queue. Accepted requests' p99 **{fmt(over.get('accepted_p99_ms'), 1)} ms** "
            f"against {fmt(over.get('capacity_accepted_p99_ms'), 1)} ms at capacity; "
            f"{fmt(over.get('refused'))} refused with `503` + `Retry-After` (slowest answered in "
            f"**{fmt(over.get('refused_max_ms'), 1)} ms**; {fmt(over.get('refused_without_retry_after'))} "
            f"without the header); {fmt(over.get('errors'))} other failures. The services' own count of "
            f"refusals: {shed or '—'}.",
            "",
            *_step_block("Overload run", over),
        ]
    if emb.get("client"):
        out += [
            "### The embedded default (SQLite + tansu, `make run`)",
            "",
            *_step_block(f"{fmt(emb.get('users'))} users, embedded", emb),
        ]
    return out


def saturation_plot(doc: Mapping[str, Any], plt: Any, save: Callable[[Any, str], None]) -> None:
    steps = (doc.get("saturation") or {}).get("steps") or []
    points = [
        (
            s["rate_per_s"],
            (((s.get("client") or {}).get("routes") or {}).get("post") or {}).get("accepted_ms", {}).get("p99"),
            (s.get("delivery_lag_ms") or {}).get("p99"),
        )
        for s in steps
    ]
    points = [p for p in points if p[1] is not None]
    if not points:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    rates = [p[0] for p in points]
    ax.plot(rates, [p[1] for p in points], marker="o", label="post p99 (ms)")
    ax.axhline(100, color="tab:blue", linestyle=":", linewidth=1)
    ax.set_xlabel("offered requests/s (open loop)")
    ax.set_ylabel("post p99 (ms)")
    ax.set_ylim(bottom=0)
    lag = [(p[0], p[2]) for p in points if p[2] is not None]
    if lag:
        ax2 = ax.twinx()
        ax2.plot([x for x, _ in lag], [y / 1000 for _, y in lag], marker="s", color="tab:orange", label="delivery lag p99 (s)")
        ax2.axhline(2, color="tab:orange", linestyle=":", linewidth=1)
        ax2.set_ylabel("delivery lag p99 (s)")
        ax2.set_ylim(bottom=0)
    cap = (doc.get("saturation") or {}).get("capacity_per_s")
    if cap:
        ax.axvline(cap, color="grey", linestyle="--", linewidth=1)
    ax.set_title(f"Saturation: capacity {fmt(cap, 0)} requests/s")
    fig.legend(loc="upper left", bbox_to_anchor=(0.1, 0.88), fontsize=8)
    save(fig, "saturation")
