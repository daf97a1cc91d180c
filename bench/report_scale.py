"""Sections 7 and 8 of docs/benchmarks.md and their plots (issue 13): the
celebrity phase and the latency-bound scaling phase. Pure like ``report``;
the plots take matplotlib's ``pyplot`` and ``report_plots``'s ``save``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .report_format import _ratio, _table, fmt
from .results import LARGE_FOLLOWED, WORKER_COUNTS, get


def _counts(per_mode: Mapping[str, Any]) -> list[str]:
    return sorted((k for k in per_mode if k.isdigit()), key=int)


def celebrity_section(doc: Mapping[str, Any], plots: Mapping[str, str]) -> list[str]:
    """Section 7: the celebrity phase (issue 13), from ``celebrity`` and
    ``details.celebrity``."""
    c: Mapping[str, Any] = doc.get("celebrity") or {}
    cd: Mapping[str, Any] = get(doc, "details.celebrity") or {}
    out = ["## 7. Celebrity: large accounts, hybrid fan-out on and off", ""]
    if not (c.get("hybrid_on") or c.get("hybrid_off")):
        return [*out, "Not measured in this run.", ""]
    runs = cd.get("runs") or {}
    rows = []
    for mode in ("off", "on"):
        per = c.get(f"hybrid_{mode}") or {}
        for n in _counts(per):
            r, rd = per[n], (runs.get(mode) or {}).get(n) or {}
            readable = rd.get("readable_by_last_follower_s") or {}
            rows.append(
                [
                    mode,
                    f"{int(n):,}",
                    fmt(rd.get("posts")),
                    fmt(r.get("post_p99_ms"), 1),
                    fmt(readable.get("p50"), 2),
                    fmt(r.get("readable_last_follower_s"), 2),
                    fmt(r.get("ordinary_lag_p99_ms"), 0),
                    fmt(r.get("rows_written")),
                    fmt(r.get("stored_rows_max_of_sampled")),
                ]
            )
    out += [
        _table(
            [
                "hybrid",
                "followers",
                "posts",
                "post p99 (ms)",
                "last follower readable p50 (s)",
                "last follower readable max (s)",
                "ordinary authors' lag p99 (ms)",
                "rows written",
                "stored rows (largest sampled owner)",
            ],
            rows,
        ),
        "",
    ]
    parts = []
    for mode in ("off", "on"):
        size = (c.get(f"hybrid_{mode}") or {}).get("largest_partition_bytes")
        if size is not None:
            parts.append(f"{fmt(size / 1024, 1)} KiB after the hybrid-{mode} runs")
    if parts:
        out += [
            "Largest `home_timeline` partition (`nodetool tablestats`, compacted partition maximum, after a "
            "flush): " + "; ".join(parts) + ".",
            "",
        ]
    if "celebrity" in plots:
        out += [f"![celebrity: time to the last follower and ordinary authors' lag]({plots['celebrity']})", ""]
    reads = c.get("home_read_ms") or {}
    rdet = cd.get("read_large") or {}
    if any((reads.get(g) or {}).get("p50") is not None for g in LARGE_FOLLOWED):
        groups = rdet.get("by_large_accounts") or {}
        out += [
            "Home reads (`GET /v1/timeline?limit=20`) by how many large accounts the reader follows:",
            "",
            _table(
                ["large accounts followed", "p50 (ms)", "p99 (ms)", "requests", "pages holding their tweets"],
                [
                    [
                        g,
                        fmt((reads.get(g) or {}).get("p50"), 2),
                        fmt((reads.get(g) or {}).get("p99"), 2),
                        fmt((groups.get(g) or {}).get("n")),
                        fmt((groups.get(g) or {}).get("pages_with_merged_tweets")),
                    ]
                    for g in LARGE_FOLLOWED
                ],
            ),
            "",
        ]
        if "home_reads" in plots:
            out += [f"![home reads by followed large accounts]({plots['home_reads']})", ""]
        if rdet.get("method"):
            out += [str(rdet["method"]), ""]
    cross = c.get("crossover") or {}
    if cross.get("text"):
        out += [
            f"**Crossover** (threshold {fmt(c.get('threshold'))} followers): {cross['text']}. The default "
            "threshold is judged against it in the targets.",
            "",
        ]
    if cd.get("method"):
        out += [str(cd["method"]), ""]
    if cd.get("seeding"):
        out += [f"Seeding: {cd['seeding']}.", ""]
    return out


def latency_scaling_section(doc: Mapping[str, Any], plots: Mapping[str, str]) -> list[str]:
    """Section 8: the fan-out with a latency injected before Cassandra (issue 13)."""
    ls: Mapping[str, Any] = doc.get("latency_scaling") or {}
    ld: Mapping[str, Any] = get(doc, "details.latency_scaling") or {}
    out = ["## 8. Scaling where latency-bound: workers with tweet-store replicas", ""]
    rates = ls.get("rows_per_s") or {}
    if not any(rates.get(n) is not None for n in WORKER_COUNTS):
        return [*out, "Not measured in this run.", ""]
    runs = ld.get("runs") or {}
    rows = []
    for label in runs or {n: {} for n in WORKER_COUNTS}:
        r = runs.get(label) or {}
        n = label.split()[0]
        rate = r.get("rows_per_s", rates.get(label))
        util = r.get("machine_cpu_utilisation")
        rows.append(
            [
                f"{n} + {n}{label[len(n) :]}",
                fmt(rate, 0),
                _ratio(rate, rates.get("1")),
                fmt(r.get("drain_s"), 1),
                "—" if util is None else f"{100 * util:.0f} %",
                {True: "**CPU-bound**", False: "no", None: "—"}[r.get("cpu_bound")],
            ]
        )
    out += [
        f"With {fmt(ls.get('delay_ms_each_way'), 1)} ms added each way between the services and Cassandra "
        f"(CQL round trip {fmt(get(ls, 'rtt_ms.direct'), 2)} ms direct, {fmt(get(ls, 'rtt_ms.proxied'), 2)} ms "
        "through the proxy):",
        "",
        _table(
            [
                "workers + tweet-store replicas (run order)",
                "rows/s (10–90 %)",
                "vs 1 (best run)",
                "drain (s)",
                "machine CPU during the drain",
                "CPU-bound on this machine?",
            ],
            rows,
        ),
        "",
    ]
    bound = [label for label, r in runs.items() if r.get("cpu_bound")]
    if bound:
        out += [
            f"The run(s) with {', '.join(bound)} worker(s) kept the machine's {fmt(ls.get('cores'))} cores "
            "busy: their figures are CPU-bound here and say what this machine can do, not what the design "
            "scales to.",
            "",
        ]
    if "latency_scaling" in plots:
        out += [f"![latency-bound scaling]({plots['latency_scaling']})", ""]
    comps: dict[str, dict[str, Any]] = {}
    for n in WORKER_COUNTS:
        for comp, v in ((runs.get(n) or {}).get("cpu_s_per_1k_rows") or {}).items():
            comps.setdefault(comp, {})[n] = v
    if comps:
        out += [
            "CPU-seconds per 1,000 home-timeline rows, by component (the capacity model in "
            "[operations.md](operations.md#capacity-model) uses the one-worker column):",
            "",
            _table(
                ["component", *(f"{n} + {n}" for n in WORKER_COUNTS)],
                [[comp, *(fmt(v.get(n), 3) for n in WORKER_COUNTS)] for comp, v in comps.items()],
            ),
            "",
        ]
    if ld.get("method"):
        out += [str(ld["method"]), ""]
    return out


def celebrity_plots(doc: Mapping[str, Any], plt: Any, save: Any) -> None:
    """The issue-13 plots: celebrity delivery, home reads, latency-bound scaling."""
    c = doc.get("celebrity") or {}
    styles = {"off": ("tab:red", "push (hybrid off)"), "on": ("tab:blue", "hybrid on")}
    if c.get("hybrid_on") or c.get("hybrid_off"):
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
        for mode, (color, label) in styles.items():
            per = c.get(f"hybrid_{mode}") or {}
            pts = [(int(n), per[n].get("readable_last_follower_s"), per[n].get("ordinary_lag_p99_ms")) for n in _counts(per)]
            a = [(x, y) for x, y, _ in pts if y is not None]
            b = [(x, z) for x, _, z in pts if z is not None]
            if a:
                left.plot([x for x, _ in a], [y for _, y in a], color=color, marker="o", label=label)
            if b:
                right.plot([x for x, _ in b], [z for _, z in b], color=color, marker="s", label=label)
        left.axhline(1.0, color="gray", linestyle=":", label="target 1 s")
        right.axhline(2000, color="gray", linestyle=":", label="target 2,000 ms")
        if c.get("threshold"):
            for ax in (left, right):
                ax.axvline(c["threshold"], color="tab:green", linestyle="--", alpha=0.6, label="threshold")
        for ax, title, ylabel in (
            (left, "Celebrity tweet to the last follower", "seconds (slowest tweet)"),
            (right, "Ordinary authors' lag meanwhile", "lag p99 (ms)"),
        ):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("followers of the celebrity")
            ax.set_ylabel(ylabel)
            ax.set_title(title)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        save(fig, "celebrity")
    reads = c.get("home_read_ms") or {}
    if any((reads.get(g) or {}).get("p50") is not None for g in LARGE_FOLLOWED):
        fig, ax = plt.subplots(figsize=(6.5, 4))
        xs = list(range(len(LARGE_FOLLOWED)))
        for off, key, color in ((-0.2, "p50", "tab:blue"), (0.2, "p99", "tab:orange")):
            ax.bar(
                [x + off for x in xs],
                [(reads.get(g) or {}).get(key) or 0 for g in LARGE_FOLLOWED],
                width=0.4,
                color=color,
                label=key,
            )
        p99_0 = (reads.get("0") or {}).get("p99")
        if p99_0:
            ax.axhline(2 * p99_0, color="tab:red", linestyle=":", label="target: p99 ≤ 2 × with none")
        ax.set_xticks(xs, LARGE_FOLLOWED)
        ax.set_xlabel("large accounts the reader follows")
        ax.set_ylabel("GET /v1/timeline (ms)")
        ax.set_title("Home reads merging large accounts")
        ax.legend(fontsize=8)
        save(fig, "home_reads")
    ls = doc.get("latency_scaling") or {}
    rates = ls.get("rows_per_s") or {}
    if any(rates.get(n) is not None for n in WORKER_COUNTS):
        fig, ax = plt.subplots(figsize=(6.5, 4))
        values = [rates.get(n) or 0 for n in WORKER_COUNTS]
        rects = ax.bar([f"{n} + {n}" for n in WORKER_COUNTS], values, color="tab:blue")
        for rect, n in zip(rects, WORKER_COUNTS, strict=True):
            v = rates.get(n)
            ax.annotate(
                "—" if v is None else f"{v:,.0f}",
                (rect.get_x() + rect.get_width() / 2, rect.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        one = rates.get("1")
        if one:
            ax.plot(
                range(len(WORKER_COUNTS)),
                [one * k for k in (1.0, 1.8, 3.2)],
                color="tab:red",
                linestyle=":",
                marker="x",
                label="targets: 1.8× and 3.2× of one",
            )
            ax.legend(fontsize=8)
        ax.set_xlabel("fan-out workers + tweet-store replicas")
        ax.set_ylabel("home-timeline rows/s")
        ax.set_title(f"Latency-bound scaling (+{ls.get('delay_ms_each_way', '?')} ms each way to Cassandra)")
        save(fig, "latency_scaling")
