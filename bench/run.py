"""Run the Fanline benchmarks (issue 4) in one go.

    python -m bench.run            # full run: bench/results/ and docs/benchmarks.md
    python -m bench.run --quick    # smoke run (a few minutes): bench/results/quick/
    python bench/run.py --quick    # the same

Starts (or reuses) the real Cassandra and Kafka through deploy/local/infra,
starts its own isolated system (keyspaces ``bench_<tag>_*``, topics
``bench.<tag>.*``, consumer group ``bench-<tag>``, ports from ``--base-port``),
runs every phase, writes the results JSON (latest + dated copy) and the
markdown page with its plots, and drops its keyspaces and topics at the end.
Progress goes to stderr with the elapsed time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # run as a script: python bench/run.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"


from . import report, results
from .common import _T0, FULL, QUICK, say
from .harness import Bench, machine_info
from .phases import (
    cassandra_stress,
    ceiling,
    celebrity,
    delivery_lag,
    latency_scaling,
    mixed,
    mixed_embedded,
    overload,
    post_latency,
    profile,
    read_path,
    saturation,
    scaling,
    streams,
)
from .procs import REPO

# Phases that create their own accounts and need none of the seeded graph.
UNSEEDED = {"streams"}


async def run_phases(bench: Bench) -> dict[str, Any]:
    """Set up, seed, run every phase (or ``--only`` those) in order, tear down;
    a failing phase is recorded in the notes and the others still run."""
    started_at = datetime.now(UTC)
    bench.doc["machine"] = machine_info()
    bench.details.update(
        mode=bench.plan.mode,
        started_at=started_at.strftime("%Y-%m-%d %H:%M UTC"),
        command="make bench" if bench.plan.mode == "full" else "make bench-quick",
        plan=bench.plan.__dict__,
        tag=bench.tag,
    )
    phases: list[tuple[str, Callable[[Bench], Awaitable[None]]]] = [
        ("ceiling", ceiling.run),
        ("stress", cassandra_stress.run),
        ("scaling", scaling.run),
        ("ceiling_again", ceiling.run_again),
        ("post_latency", post_latency.run),
        ("delivery_lag", delivery_lag.run),
        ("read_path", read_path.run),
        ("streams", streams.run),
        ("profile", profile.run),
        # Issue 13. Last: both restart services (workers with other settings,
        # social-graph behind a latency proxy) and put them back afterwards.
        ("celebrity", celebrity.run),
        ("latency_scaling", latency_scaling.run),
        # Issue 18: the open-loop mixed workload (vegeta), its saturation
        # curve, twice that rate (admission control sheds), and the embedded
        # default on a system of its own.
        ("mixed", mixed.run),
        ("saturation", saturation.run),
        ("overload", overload.run),
        ("mixed_embedded", mixed_embedded.run),
    ]
    only = set(bench.args.only.split(",")) if bench.args.only else None
    unknown = (only or set()) - {name for name, _ in phases}
    if unknown:
        raise SystemExit(f"unknown phase(s): {', '.join(sorted(unknown))}")
    timings: dict[str, float] = {}
    try:
        await bench.setup()
        if only is None or only - UNSEEDED:
            await bench.seed()
        for name, phase in phases:
            if only is not None and name not in only:
                continue
            t = time.monotonic()
            try:
                await phase(bench)
            except Exception as exc:  # noqa: BLE001 - record, keep the other phases
                say(f"phase {name} FAILED: {exc!r}")
                traceback.print_exc()
                bench.notes.append(f"phase {name} failed: {type(exc).__name__}: {exc}")
            timings[name] = round(time.monotonic() - t, 1)
            say(f"phase {name}: {timings[name]:.0f}s")
    finally:
        await bench.teardown()
    bench.details["phase_seconds"] = timings
    bench.details["duration_s"] = round(time.monotonic() - _T0, 1)
    bench.details["memory_method"] = (
        "Peak RSS is the kernel's high-water mark (`VmHWM` in /proc/<pid>/status) of each service process, "
        "polled every 0.5 s for the whole run; for the worker, the largest of every worker process started "
        "(1, 2 or 4 at a time). The synchronous baseline's process peaked at "
        f"{(bench.monitor.peak_mb().get('sync-baseline') if bench.monitor else None) or '—'} MB."
    )
    return bench.doc


# --- output ------------------------------------------------------------------------------------


def publish(doc: dict[str, Any], out_dir: Path, md_path: Path, plots_dir: Path, now: datetime) -> list[Path]:
    """Write the JSON (latest + dated), the plots and the markdown page."""
    results.finalize(doc)
    latest, dated = results.write_results(doc, out_dir, now)
    written = [latest, dated]
    try:
        plots = report.make_plots(doc, plots_dir)
    except ImportError as exc:
        say(f"matplotlib missing, no plots: {exc}")
        plots = {}
    written += plots.values()
    rel = {k: os.path.relpath(v, md_path.parent) for k, v in plots.items()}
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(report.render_markdown(doc, rel, os.path.relpath(latest, md_path.parent)))
    written.append(md_path)
    return written


def _rates(text: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(r) for r in text.split(",") if r.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if any(not r > 0 for r in rates):
        raise argparse.ArgumentTypeError(f"rates must be positive: {text!r}")
    return rates


def _int_list(text: str, minimum: int, what: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(c) for c in text.split(",") if c.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not counts or any(c < minimum for c in counts):
        raise argparse.ArgumentTypeError(f"{what} must be at least {minimum}: {text!r}")
    return counts


def _counts(text: str) -> tuple[int, ...]:
    return _int_list(text, 5, "follower counts (five watchers)")


def _counts_any(text: str) -> tuple[int, ...]:
    return _int_list(text, 1, "counts")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run (a few minutes)")
    parser.add_argument("--base-port", type=int, default=30000, help="first port of the isolated system (default 30000)")
    parser.add_argument("--out", type=Path, help="results directory (default bench/results, or bench/results/quick)")
    parser.add_argument("--docs", type=Path, help="markdown page (default docs/benchmarks.md, or <out>/benchmarks.md)")
    parser.add_argument(
        "--only",
        "--phases",
        dest="only",
        metavar="PHASES",
        help="comma-separated phases to run (ceiling,stress,scaling,ceiling_again,post_latency,"
        "delivery_lag,read_path,streams,profile,celebrity,latency_scaling,mixed,saturation,overload,"
        "mixed_embedded); default all; "
        "the results are merged into the previous latest.json, keeping every other figure",
    )
    parser.add_argument("--lag-rate", type=float, help="tweets/s in the delivery-lag phase")
    parser.add_argument(
        "--lag-sweep",
        type=_rates,
        metavar="R1,R2",
        help="further tweets/s for the delivery-lag phase, comma-separated ('' for none)",
    )
    parser.add_argument("--read-rate", type=float, help="GET /v1/timeline requests/s in the read-path phase")
    parser.add_argument(
        "--celebrity-counts",
        type=_counts,
        metavar="N1,N2",
        help="follower counts of the celebrity phase (default 1000,10000,100000,1000000)",
    )
    parser.add_argument("--celebrity-posts", type=int, help="posts per follower count and mode in the celebrity phase")
    parser.add_argument(
        "--scale-delay-ms", type=float, help="latency added each way to Cassandra in the latency_scaling phase (default 5)"
    )
    parser.add_argument(
        "--scale-counts",
        type=_counts_any,
        metavar="N1,N2",
        help="worker counts of the latency_scaling phase, in order (default 1,2,4,1)",
    )
    parser.add_argument(
        "--backlog-authors",
        type=int,
        help="authors of the scaling phases' backlog (default 8: one per partition, so 8 ordered lanes)",
    )
    parser.add_argument("--repeats", type=int, help="rounds of every repeated ratio (default 3; at least 1)")
    parser.add_argument("--post-samples", type=int, help="posts per group, block and round in the post-latency phase")
    # The deployment measured: docs/operations.md's recommendation for shared
    # cores (background work in its own processes, at a lower CPU priority).
    parser.add_argument(
        "--fanout-replica",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="deployment: a social-graph and a tweet-store replica only the fan-out worker calls (default: on)",
    )
    parser.add_argument(
        "--background-nice",
        type=int,
        default=10,
        choices=range(0, 20),
        metavar="0-19",
        help="deployment: CPU niceness of the fan-out worker(s) and their replicas (default 10)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the keyspaces and topics afterwards")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="experiment: extra environment for every service (e.g. FANLINE_HOME_WRITE_WINDOW=32)",
    )
    return parser.parse_args(argv)


def stop_on_signals() -> None:
    """Ctrl-C and SIGTERM both stop a run *with* its teardown (keyspaces and
    topics dropped, every service stopped): ``asyncio.run`` cancels the
    running phase on SIGINT only if SIGINT has Python's default handler, and
    a process started as a shell's background job inherits it ignored; a
    SIGTERM is turned into that SIGINT."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: os.kill(os.getpid(), signal.SIGINT))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop_on_signals()
    plan = QUICK if args.quick else FULL
    if args.lag_rate:
        plan = replace(plan, lag_rate=args.lag_rate)
    if args.lag_sweep is not None:
        plan = replace(plan, lag_sweep_rates=args.lag_sweep)
    if args.read_rate:
        plan = replace(plan, read_rate=args.read_rate)
    narrowed = {
        "celebrity_counts": args.celebrity_counts,
        "celebrity_posts": args.celebrity_posts,
        "backlog_authors": args.backlog_authors,
        "scale_delay_ms": args.scale_delay_ms,
        "scale_counts": args.scale_counts,
        "repeats": args.repeats,
        "post_samples": args.post_samples,
    }
    plan = replace(plan, **{field: value for field, value in narrowed.items() if value is not None})
    out = args.out or (REPO / "bench" / "results" / ("quick" if args.quick else ""))
    md = args.docs or (out / "benchmarks.md" if args.quick else REPO / "docs" / "benchmarks.md")
    plots_dir = md.parent / ("plots" if args.quick else "benchmarks")
    bench = Bench(plan, args)
    try:
        doc = asyncio.run(run_phases(bench))
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    now = datetime.now()
    latest = out / "latest.json"
    if args.only and latest.exists():
        # Only some phases ran: keep every other figure of the previous results.
        phases = args.only.split(",")
        doc = results.merge_partial(json.loads(latest.read_text()), doc, phases)
        say(f"merged the {', '.join(phases)} results into the previous {os.path.relpath(latest, REPO)}")
    written = publish(doc, out, md, plots_dir, now)
    say("wrote " + ", ".join(os.path.relpath(p, REPO) for p in written))
    for t in results.evaluate_targets(doc):
        say(
            f"target {t.key}: measured {t.measured if t.measured is None else round(t.measured, 2)} "
            f"{t.op} {t.bound if t.bound is None else round(t.bound, 2)}: "
            f"{ {True: 'pass', False: 'FAIL', None: 'not measured'}[t.passed] }"
        )
    print(json.dumps(doc.get("targets", {}), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
