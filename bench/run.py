"""Run the Fanline benchmarks on the real Cassandra and Kafka.

    python -m bench.run                        # every scenario (make bench): bench/results/, docs/benchmarks.md
    python -m bench.run --quick                # a few minutes (make bench-quick): bench/results/quick/
    python -m bench.run --only celebrity       # some scenarios, merged into the previous results
    python -m bench.run --baseline-ref 5e0d410 --only baseline_ref   # capacity beside a git ref
    python -m bench.run --set paired_cost.ref=HEAD~1 --only paired_cost   # a change's cost: both under load at once
    python -m bench.run --render               # the page again from latest.json, nothing run

Starts (or reuses) the engines through ``deploy.local.infra`` and its own
isolated system (keyspaces ``bench_<tag>_*``, topics ``bench.<tag>.*``, ports
from ``--base-port``), runs the scenarios of ``scenarios.toml`` in order (one
that fails is noted, the others still run), writes the rows, renders the page,
and drops its keyspaces and topics. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import signal
import subprocess
import sys
import time
import tomllib
import traceback
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import report, rows, targets
from .context import REPO, Ctx, say

PLAN = Path(__file__).with_name("scenarios.toml")
RESULTS = REPO / "bench" / "results"  # the committed results; --out writes elsewhere


def load_plan(quick: bool, overrides: Sequence[str] = (), path: Path = PLAN) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """(scenarios in run order, parameters per table) of a full or quick run; ``overrides``:
    ``name.key=value`` (a TOML value; anything else is a string)."""
    data = tomllib.loads(path.read_text())
    quick_params, order = data.pop("quick", {}), data.pop("order")
    params = {name: {**table, **(quick_params.get(name, {}) if quick else {})} for name, table in data.items()}
    for item in overrides:
        dotted, _, text = item.partition("=")
        name, _, key = dotted.partition(".")
        if key not in params.get(name, {}):
            raise SystemExit(f"--set {item}: no parameter {dotted} in {path.name}")
        try:
            params[name][key] = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            params[name][key] = text
    return order, params


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=(__doc__ or "").splitlines()[0])
    add = parser.add_argument
    add("--quick", action="store_true", help="a few minutes: every scenario small (bench/results/quick/)")
    add("--only", "--phases", dest="only", metavar="NAMES", help="comma-separated scenarios, merged into latest.json")
    add("--set", action="append", default=[], metavar="NAME.KEY=VALUE", help="a parameter, e.g. celebrity.counts=[1000,10000]")
    add("--baseline-ref", metavar="REF", help="a git ref whose capacity the baseline_ref scenario measures beside this one")
    add("--base-port", type=int, default=30000 + int(os.environ.get("FANLINE_TEST_PORT_OFFSET", "0")), help="first port used")
    add("--out", type=Path, help="results directory (default bench/results, or bench/results/quick)")
    add("--docs", type=Path, help="the page (default docs/benchmarks.md, or <out>/benchmarks.md)")
    add("--render", action="store_true", help="render the page from <out>/latest.json, run nothing")
    add("--fanout-replica", action=argparse.BooleanOptionalAction, default=True, help="fan-out replicas of the stores")
    add(
        "--colocate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the stores in the gateway's process, the fan-out replicas in the worker's (--no-colocate: a process each)",
    )
    add("--background-nice", type=int, default=10, choices=range(20), metavar="0-19", help="niceness of the fan-out (default 10)")
    add("--keep", action="store_true", help="keep the keyspaces and topics afterwards")
    add("--env", action="append", default=[], metavar="KEY=VALUE", help="experiment: extra environment for every service")
    return parser.parse_args(argv)


async def run(ctx: Ctx, order: list[str], only: set[str] | None) -> None:
    """Set up, seed (unless only unseeded scenarios run), run the scenarios, tear down."""
    started, chosen = time.monotonic(), [name for name in order if only is None or name in only]
    try:
        await ctx.setup()
        if any(not ctx.params[name].get("unseeded") for name in chosen):
            await ctx.seed()
        for name in chosen:
            ctx.rec.add(rows.META, "load_1m", os.getloadavg()[0], "", of=name)
            t, module = time.monotonic(), importlib.import_module(f"bench.scenarios.{ctx.params[name]['module']}")
            try:
                await getattr(module, name)(ctx, ctx.params[name])
            except Exception as exc:  # noqa: BLE001 - noted; the other scenarios still run
                say(f"scenario {name} FAILED: {exc!r}")
                traceback.print_exc()
                ctx.rec.scope(name).note(f"failed: {type(exc).__name__}: {exc}"[:500])
                if ctx.system.core_running() and not ctx.system.running_workers():
                    # one that failed with the workers stopped must not stall the next (nothing delivers)
                    await asyncio.to_thread(ctx.system.start_workers, 1)
            ctx.rec.add(rows.META, "seconds", time.monotonic() - t, "s", of=name)
            say(f"scenario {name}: {time.monotonic() - t:.0f}s")
    finally:
        await ctx.teardown(partial=only is not None)
        ctx.rec.add(rows.META, "duration_s", time.monotonic() - started)


def refresh_capacity_model(latest: Path) -> None:
    """docs/operations/scale.md's capacity model is generated from the repository's
    latest.json (a unit test checks it is current): rewrite it whenever that file
    changes, so committing a run cannot leave the page behind. Other outputs
    (--out, --quick) leave it alone."""
    if latest != RESULTS / "latest.json":
        return
    done = subprocess.run([sys.executable, str(REPO / "tools" / "capacity_model.py")], capture_output=True, text=True)
    failed = f"capacity model not written: {done.stderr.strip()}"
    say("wrote docs/operations/scale.md (capacity model)" if done.returncode == 0 else failed)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out or RESULTS / ("quick" if args.quick else "")
    page = args.docs or (out / "benchmarks.md" if args.quick or args.out else REPO / "docs" / "benchmarks.md")
    latest = out / "latest.json"
    if args.render:
        say("wrote " + ", ".join(map(str, report.render(rows.load(latest), page, latest))))
        refresh_capacity_model(latest)
        return 0
    order, params = load_plan(args.quick, args.set)
    if unknown := set(args.only.split(",") if args.only else ()) - set(order):
        raise SystemExit(f"unknown scenario(s): {', '.join(sorted(unknown))} (known: {', '.join(order)})")
    # Ctrl-C and SIGTERM both stop a run with its teardown (SIGINT may be inherited ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    run_id = f"{datetime.now(UTC):%Y-%m-%dT%H%M}-{uuid.uuid4().hex[:4]}"
    rec = rows.Recorder(run_id, REPO / "test-artifacts" / f"bench-{run_id[-4:]}" / "rows.jsonl")
    git = [
        subprocess.run(["git", *a.split()], cwd=REPO, capture_output=True, text=True).stdout.strip()
        for a in ("rev-parse HEAD", "status -s -uno")
    ]
    rec.add(rows.META, "started_at", f"{datetime.now(UTC):%Y-%m-%d %H:%M UTC}")
    rec.add(rows.META, "mode", "quick" if args.quick else "full")
    rec.add(rows.META, "command", " ".join(["python -m bench.run", *(sys.argv[1:] if argv is None else argv)]))
    rec.add(rows.META, "git", git[0][:12] + (" (uncommitted changes)" if git[1] else ""))
    for name, table in params.items():
        for key, value in table.items():
            rec.add(rows.META, "param", str(value), "", key=f"{name}.{key}")
    previous = rows.load(latest) if args.only else []
    try:
        asyncio.run(run(Ctx(args, params, rec, rows.Results(previous)), order, set(args.only.split(",")) if args.only else None))
    except KeyboardInterrupt:
        say("interrupted; the rows measured so far are in " + str(rec._log))
        return 130
    merged = rows.merge(previous, rec.rows) if args.only else rec.rows
    rows.write(rec.rows, out / f"{run_id}.json")
    rows.write(merged, latest)
    say("wrote " + ", ".join(map(str, [out / f"{run_id}.json", latest, *report.render(merged, page, latest)])))
    refresh_capacity_model(latest)
    for v in targets.evaluate(rows.Results(merged)):
        say(f"target {v.key}: {v.measured} {v.op} {v.bound}: {v.result} {v.note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
