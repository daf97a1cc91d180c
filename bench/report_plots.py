"""The PNG plots of docs/benchmarks.md, drawn with matplotlib's Agg backend
from the results document alone: ``make_plots`` draws the write-path plots
(post latency, fan-out, scaling, delivery lag) and asks the celebrity and
open-loop modules for theirs. matplotlib is imported only when plotting."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .report_openloop import saturation_plot
from .report_scale import celebrity_plots
from .results import FOLLOWER_COUNTS, WORKER_COUNTS, get

PLOTS = {
    "post_latency": "post_latency.png",
    "fanout": "fanout_throughput.png",
    "scaling": "scaling.png",
    "lag": "delivery_lag.png",
    "celebrity": "celebrity.png",
    "home_reads": "home_reads_large_accounts.png",
    "latency_scaling": "latency_scaling.png",
    "saturation": "saturation.png",
}


def make_plots(doc: Mapping[str, Any], out_dir: Path) -> dict[str, Path]:
    """Draw every plot the document has data for; return {PLOTS key: path}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    made: dict[str, Path] = {}

    def save(fig: Any, key: str) -> None:
        path = out_dir / PLOTS[key]
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made[key] = path

    # Post latency vs followers
    pl = doc.get("post_latency_ms") or {}
    if any(get(pl, f"{side}.{n}.p50") is not None for side in ("ours", "sync_baseline") for n in FOLLOWER_COUNTS):
        fig, ax = plt.subplots(figsize=(7, 4.2))
        xs = list(range(len(FOLLOWER_COUNTS)))
        styles = {
            ("ours", "p50"): ("tab:blue", "-", "o"),
            ("ours", "p99"): ("tab:blue", "--", "s"),
            ("sync_baseline", "p50"): ("tab:red", "-", "o"),
            ("sync_baseline", "p99"): ("tab:red", "--", "s"),
        }
        for (side, p), (color, line, marker) in styles.items():
            ys = [get(pl, f"{side}.{n}.{p}") for n in FOLLOWER_COUNTS]
            pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
            if pts:
                label = f"{'Fanline (async fan-out)' if side == 'ours' else 'synchronous baseline'} {p}"
                ax.plot([x for x, _ in pts], [y for _, y in pts], color=color, linestyle=line, marker=marker, label=label)
        stopped = [get(doc, f"details.post_latency.ours_worker_stopped.{n}.p99") for n in FOLLOWER_COUNTS]
        pts = [(x, y) for x, y in zip(xs, stopped, strict=True) if y is not None]
        if pts:
            ax.plot(
                [x for x, _ in pts],
                [y for _, y in pts],
                color="tab:cyan",
                linestyle=":",
                marker="^",
                label="Fanline p99, worker stopped",
            )
        ax.set_xticks(xs, [f"{int(n):,}" for n in FOLLOWER_COUNTS])
        ax.set_yscale("log")
        ax.set_xlabel("followers of the author")
        ax.set_ylabel("POST latency (ms, log scale)")
        ax.set_title("Post latency vs followers")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "post_latency")

    # Fan-out throughput vs ceilings
    fo = doc.get("fanout_rows_per_s") or {}
    bars = [
        ("worker\n(1 process)", fo.get("worker"), "tab:blue"),
        ("bare driver\n(ceiling)", fo.get("bare_driver"), "tab:gray"),
        ("cassandra-stress\nwrite ops/s", fo.get("cassandra_stress_ops"), "tab:olive"),
    ]
    if any(v is not None for _, v, _ in bars):
        fig, ax = plt.subplots(figsize=(6.5, 4))
        names = [b[0] for b in bars]
        values = [b[1] or 0 for b in bars]
        rects = ax.bar(names, values, color=[b[2] for b in bars])
        for rect, (_, v, _) in zip(rects, bars, strict=True):
            ax.annotate(
                "not measured" if v is None else f"{v:,.0f}",
                (rect.get_x() + rect.get_width() / 2, rect.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        if fo.get("bare_driver"):
            ax.axhline(0.7 * fo["bare_driver"], color="tab:red", linestyle=":", label="target: 0.7 × bare driver")
            ax.legend(fontsize=8)
        ax.set_ylabel("home-timeline rows/s")
        ax.set_title("Fan-out throughput vs ceilings")
        save(fig, "fanout")

    # Scaling
    sc = doc.get("scaling_rows_per_s") or {}
    if any(sc.get(n) is not None for n in WORKER_COUNTS):
        fig, ax = plt.subplots(figsize=(6.5, 4))
        values = [sc.get(n) or 0 for n in WORKER_COUNTS]
        rects = ax.bar([f"{n} worker{'s' if n != '1' else ''}" for n in WORKER_COUNTS], values, color="tab:blue")
        for rect, n in zip(rects, WORKER_COUNTS, strict=True):
            v = sc.get(n)
            ax.annotate(
                "—" if v is None else f"{v:,.0f}",
                (rect.get_x() + rect.get_width() / 2, rect.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        if fo.get("bare_driver"):
            ax.axhline(fo["bare_driver"], color="tab:gray", linestyle="--", label="bare-driver ceiling")
            ax.legend(fontsize=8)
        ax.set_ylabel("home-timeline rows/s")
        ax.set_title(f"Fan-out scaling ({sc.get('cores', '?')} cores)")
        save(fig, "scaling")

    # Delivery lag distribution
    samples = get(doc, "details.delivery_lag.samples_ms") or []
    if samples:
        fig, ax = plt.subplots(figsize=(6.5, 4))
        ax.hist(samples, bins=min(40, max(5, len(samples) // 3)), color="tab:blue", alpha=0.8)
        lg = doc.get("delivery_lag_ms") or {}
        for key, style in (("p50", "-"), ("p99", "--")):
            if lg.get(key) is not None:
                ax.axvline(lg[key], color="black", linestyle=style, label=f"{key} {lg[key]:,.0f} ms")
        ax.axvline(2000, color="tab:red", linestyle=":", label="target p99 ≤ 2,000 ms")
        ax.set_xlabel("201 → readable in every follower's home timeline (ms)")
        ax.set_ylabel("tweets")
        ax.set_title(f"Delivery lag, {lg.get('followers', '?')} followers at {lg.get('rate_per_s', '?')} tweets/s")
        ax.legend(fontsize=8)
        save(fig, "lag")
    celebrity_plots(doc, plt, save)
    saturation_plot(doc, plt, save)
    return made
