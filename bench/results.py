"""The results document: its schema (issue 4), the targets, and the writer.

Other tools read ``bench/results/latest.json``, so the keys below are a
contract: ``SCHEMA`` lists every required key path, ``missing_keys`` checks a
document against it, and ``write_results`` refuses to write one that lacks a
key. A figure that could not be measured is ``null`` (never invented), and
``details`` says why. Extra top-level keys (``details``, ``targets``) carry
sample counts, methods and notes for humans; readers may ignore them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from . import results_openloop
from .results_fair import FAIR_SCHEMA, empty_fair, fair_targets

FOLLOWER_COUNTS = ("0", "100", "1000", "10000")
WORKER_COUNTS = ("1", "2", "4")
SERVICES = ("api", "social-graph", "tweet-store", "fanout-worker")
LARGE_FOLLOWED = ("0", "10", "100")  # large accounts a home reader follows (issue 13)

# Every key path the schema requires ("a.b.c").
SCHEMA: tuple[str, ...] = (
    "machine",
    "versions",
    *(f"post_latency_ms.{side}.{n}.{p}" for side in ("ours", "sync_baseline") for n in FOLLOWER_COUNTS for p in ("p50", "p99")),
    "fanout_rows_per_s.worker",
    "fanout_rows_per_s.bare_driver",
    "fanout_rows_per_s.cassandra_stress_ops",
    "delivery_lag_ms.followers",
    "delivery_lag_ms.rate_per_s",
    "delivery_lag_ms.p50",
    "delivery_lag_ms.p99",
    *(f"timeline_read_ms.{side}.{p}" for side in ("api", "raw") for p in ("p50", "p99")),
    "timeline_read_ms.rate_per_s",
    *(f"scaling_rows_per_s.{n}" for n in WORKER_COUNTS),
    "scaling_rows_per_s.cores",
    *(f"peak_rss_mb.{s}" for s in SERVICES),
    # issue 13: the celebrity and latency-bound scaling phases
    "celebrity.threshold",
    "celebrity.hybrid_on",
    "celebrity.hybrid_off",
    *(f"celebrity.home_read_ms.{g}.{p}" for g in LARGE_FOLLOWED for p in ("p50", "p99")),
    "celebrity.crossover_followers",
    *(f"latency_scaling.rows_per_s.{n}" for n in WORKER_COUNTS),
    *(f"latency_scaling.ratio_vs_1.{n}" for n in WORKER_COUNTS[1:]),
    "latency_scaling.delay_ms_each_way",
    "latency_scaling.cpu_s_per_1k_rows",
    # issue 16: live streams
    "streams.streams",
    "streams.rate_per_s",
    "streams.update_latency_ms.p50",
    "streams.update_latency_ms.p99",
    "streams.kib_per_idle_stream",
    "streams.idle_heartbeat_cpu_percent",
    # issue 18: the open-loop mixed workload, saturation, overload, embedded
    *results_openloop.SCHEMA,
    # issue 18: fair baselines and repeated ratios (results_fair.py)
    *FAIR_SCHEMA,
)


def empty_result() -> dict[str, Any]:
    """A document with every key present and every figure ``None``."""
    pct: dict[str, Any] = {"p50": None, "p99": None}
    return {
        "machine": {},
        "versions": {},
        "post_latency_ms": {side: {n: dict(pct) for n in FOLLOWER_COUNTS} for side in ("ours", "sync_baseline")},
        "fanout_rows_per_s": {"worker": None, "bare_driver": None, "cassandra_stress_ops": None, "cassandra_stress_rows": None},
        "delivery_lag_ms": {"followers": 1000, "rate_per_s": None, "p50": None, "p99": None},
        "timeline_read_ms": {"api": dict(pct), "raw": dict(pct), "rate_per_s": None},
        "scaling_rows_per_s": {**{n: None for n in WORKER_COUNTS}, "cores": None},
        "peak_rss_mb": {s: None for s in SERVICES},
        "celebrity": {
            "threshold": None,
            "hybrid_on": {},
            "hybrid_off": {},
            "home_read_ms": {g: dict(pct) for g in LARGE_FOLLOWED},
            "crossover_followers": None,
        },
        "latency_scaling": {
            "delay_ms_each_way": None,
            "rows_per_s": {n: None for n in WORKER_COUNTS},
            "ratio_vs_1": {n: None for n in WORKER_COUNTS[1:]},
            "cpu_s_per_1k_rows": None,
        },
        "streams": {
            "streams": None,
            "rate_per_s": None,
            "update_latency_ms": dict(pct),
            "kib_per_idle_stream": None,
            "idle_heartbeat_cpu_percent": None,
        },
        **results_openloop.empty(),
        **empty_fair(),
        "details": {},
    }


def missing_keys(doc: Mapping[str, Any]) -> list[str]:
    """Key paths of ``SCHEMA`` absent from ``doc`` (a null value counts as present)."""
    missing = []
    for path in SCHEMA:
        node: Any = doc
        for part in path.split("."):
            if not isinstance(node, Mapping) or part not in node:
                missing.append(path)
                break
            node = node[part]
    return missing


def get(doc: Mapping[str, Any], path: str) -> Any:
    """The value at ``a.b.c``, or None if any part is missing."""
    node: Any = doc
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


# --- targets -----------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """``measured OP bound``, where both sides are computed from the document."""

    key: str
    text: str  # the wording
    measured: float | None
    bound: float | None
    op: str  # "<=" or ">="
    measured_label: str
    bound_label: str
    valid: bool = True  # False: measured, but not under the target's conditions (``note`` says why)
    note: str = ""

    @property
    def passed(self) -> bool | None:
        if self.measured is None or self.bound is None or not self.valid:
            return None
        return self.measured <= self.bound if self.op == "<=" else self.measured >= self.bound

    def as_json(self) -> dict[str, Any]:
        return {
            "target": self.text,
            "measured": _round(self.measured),
            "bound": _round(self.bound),
            "op": self.op,
            "measured_is": self.measured_label,
            "bound_is": self.bound_label,
            "pass": self.passed,
            **({"note": self.note} if self.note else {}),
        }


def _round(x: float | None, digits: int = 3) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, digits)


def _num(doc: Mapping[str, Any], path: str) -> float | None:
    value = get(doc, path)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _mul(a: float | None, k: float) -> float | None:
    return None if a is None else a * k


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def largest_count(doc: Mapping[str, Any], mode: str) -> str | None:
    """The largest follower count the celebrity phase measured in ``mode``
    (``on``/``off``): 1,000,000 in a full run."""
    runs = get(doc, f"celebrity.hybrid_{mode}") or {}
    counts = [k for k in runs if k.isdigit()]
    return max(counts, key=int) if counts else None


def _log_distance(a: float | None, b: float | None) -> float | None:
    return abs(math.log10(a / b)) if a and b and a > 0 and b > 0 else None


def celebrity_targets(doc: Mapping[str, Any]) -> list[Target]:
    """Issue 13's benchmark targets (celebrity and latency-bound scaling)."""
    on, off = largest_count(doc, "on"), largest_count(doc, "off")
    at_on = f" at {int(on):,} followers" if on else ""
    at_off = f" at {int(off):,} followers" if off else ""
    read0 = _num(doc, "celebrity.home_read_ms.0.p99")
    read10 = _num(doc, "celebrity.home_read_ms.10.p99")
    threshold = _num(doc, "celebrity.threshold")
    cross = _num(doc, "celebrity.crossover_followers")
    one = _num(doc, "latency_scaling.rows_per_s.1")
    return [
        Target(
            "celebrity_readable_1s",
            "a 1,000,000-follower author's tweet readable by every follower within 1 s (hybrid on)",
            _num(doc, f"celebrity.hybrid_on.{on}.readable_last_follower_s") if on else None,
            1.0,
            "<=",
            f"slowest tweet to the last follower{at_on} (s)",
            "1 s",
        ),
        Target(
            "celebrity_ordinary_lag",
            "ordinary authors' delivery lag p99 ≤ 2 s while a 1,000,000-follower author posts (hybrid on)",
            _num(doc, f"celebrity.hybrid_on.{on}.ordinary_lag_p99_ms") if on else None,
            2000.0,
            "<=",
            f"ordinary lag p99{at_on} (ms)",
            "2,000 ms",
        ),
        Target(
            "celebrity_ordinary_lag_push",
            "ordinary authors' delivery lag p99 ≤ 2 s while a 1,000,000-follower "
            "author posts (hybrid off: the push path is fair)",
            _num(doc, f"celebrity.hybrid_off.{off}.ordinary_lag_p99_ms") if off else None,
            2000.0,
            "<=",
            f"ordinary lag p99{at_off}, hybrid off (ms)",
            "2,000 ms",
        ),
        Target(
            "home_read_large",
            "home-read p99 following 10 large accounts ≤ 2 × following none",
            read10,
            _mul(read0, 2.0),
            "<=",
            "p99 with 10 large accounts (ms)",
            "2 × p99 with none (ms)",
        ),
        Target(
            "threshold_crossover",
            "the default large-account threshold within 3× of the measured crossover",
            _log_distance(threshold, cross),
            math.log10(3),
            "<=",
            "abs(log10(threshold ÷ crossover))",
            "log10(3)",
        ),
        Target(
            "latency_scaling_2",
            "latency-bound fan-out: 2 workers + 2 replicas ≥ 1.8 × the rows/s of one",
            _div(_num(doc, "latency_scaling.rows_per_s.2"), one),
            1.8,
            ">=",
            "rows/s of 2 ÷ rows/s of 1",
            "1.8",
        ),
        Target(
            "latency_scaling_4",
            "latency-bound fan-out: 4 workers + 4 replicas ≥ 3.2 × the rows/s of one",
            _div(_num(doc, "latency_scaling.rows_per_s.4"), one),
            3.2,
            ">=",
            "rows/s of 4 ÷ rows/s of 1",
            "3.2",
        ),
    ]


def evaluate_targets(doc: Mapping[str, Any]) -> list[Target]:
    """The five targets of issue 4 (the ratio ones re-stated against issue 18's
    fair baselines, judged on the median of repeated ratios), issue 13's, the
    two of issue 16 and issue 18's new ones, each as measured-vs-bound from
    the same run."""
    ours0 = _num(doc, "post_latency_ms.ours.0.p99")
    ours10k = _num(doc, "post_latency_ms.ours.10000.p99")
    sync10k = _num(doc, "post_latency_ms.sync_baseline.10000.p99")
    worker = _num(doc, "fanout_rows_per_s.worker")
    bare = _num(doc, "fanout_rows_per_s.bare_driver")
    api50 = _num(doc, "timeline_read_ms.api.p50")
    raw50 = _num(doc, "timeline_read_ms.raw.p50")
    lag99 = _num(doc, "delivery_lag_ms.p99")
    stream99 = _num(doc, "streams.update_latency_ms.p99")
    stream_kib = _num(doc, "streams.kib_per_idle_stream")
    fair = fair_targets(doc)
    old = [
        Target(
            "post_p99_flat",
            "post p99 at 10,000 followers ≤ 1.5 × post p99 at 0 followers",
            ours10k,
            _mul(ours0, 1.5),
            "<=",
            "p99 at 10,000 (ms)",
            "1.5 × p99 at 0 (ms)",
        ),
        Target(
            "sync_ratio",
            "synchronous-baseline p99 ÷ ours at 10,000 followers ≥ 50",
            _div(sync10k, ours10k),
            50.0,
            ">=",
            "sync p99 ÷ ours p99",
            "50",
        ),
        Target(
            "worker_vs_driver",
            "fan-out worker rows/s ≥ 0.7 × the bare-driver ceiling",
            worker,
            _mul(bare, 0.7),
            ">=",
            "worker rows/s",
            "0.7 × bare-driver rows/s",
        ),
        Target(
            "read_vs_raw",
            "timeline read p50 ≤ 2 × the raw CQL p50",
            api50,
            _mul(raw50, 2.0),
            "<=",
            "GET /v1/timeline p50 (ms)",
            "2 × raw CQL p50 (ms)",
        ),
        Target(
            "lag_p99",
            "delivery lag p99 ≤ 2 s for 1,000 followers at the reported rate",
            lag99,
            2000.0,
            "<=",
            "lag p99 (ms)",
            "2,000 ms",
        ),
        *celebrity_targets(doc),
        Target(
            "stream_p99",
            "stream update latency p99 ≤ 1 s (1,000 home streams, 5 posts/s to ~100 each)",
            stream99,
            1000.0,
            "<=",
            "update p99 (ms)",
            "1,000 ms",
        ),
        Target("stream_memory", "memory per idle stream ≤ 50 KiB", stream_kib, 50.0, "<=", "KiB per idle stream", "50 KiB"),
        *(Target(*spec) for spec in results_openloop.target_specs(doc)),
    ]
    # Issue 18: the old keys keep their place, judged against the fair baselines.
    merged = [fair.pop(t.key, t) for t in old]
    return merged + list(fair.values())


# --- partial runs ------------------------------------------------------------------

# Describe the full run that produced the document: a partial run never replaces them.
RUN_KEYS = ("machine", "versions", "peak_rss_mb")
# The run's own bookkeeping in ``details``: a partial run keeps its copy in ``details.partial_runs``.
RUN_DETAILS = (
    "mode",
    "started_at",
    "command",
    "plan",
    "tag",
    "notes",
    "phase_seconds",
    "duration_s",
    "memory_method",
    "experiment",
    "deployment",
)


def _merge_figures(old: Any, new: Any) -> Any:
    """``old`` with every figure ``new`` measured (a non-null leaf) put in."""
    if isinstance(old, dict) and isinstance(new, dict):
        merged = dict(old)
        for key, value in new.items():
            merged[key] = _merge_figures(old.get(key), value) if key in old else value
        return merged
    # An unmeasured figure is null, or an empty collection (a ratio's list of
    # values; its count is null): neither replaces what an earlier run measured.
    return old if new is None or new == {} or new == [] else new


def merge_partial(previous: Mapping[str, Any], run: Mapping[str, Any], phases: list[str]) -> dict[str, Any]:
    """The document of a run of only some ``phases`` (``--only``) folded into
    the previous results, so that ``latest.json`` keeps every other key.

    Figures the run measured replace the previous ones; figures it did not
    measure (null) keep the previous value; the machine, versions and peak
    RSS stay those of the full run. ``details`` gets the run's per-phase
    details, and its own bookkeeping (date, plan, load, notes) is appended to
    ``details.partial_runs``. Targets are evaluated again by ``finalize``."""
    doc: dict[str, Any] = {k: v for k, v in previous.items() if k != "targets"}
    for key, value in run.items():
        if key in (*RUN_KEYS, "details", "targets"):
            continue
        doc[key] = _merge_figures(doc[key], value) if key in doc else value
    for path in missing_keys(doc):  # keys added to the schema since the previous run: null
        node, parts = doc, path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node.setdefault(parts[-1], None)
    details = dict(previous.get("details") or {})
    run_details = dict(run.get("details") or {})
    for key, value in run_details.items():
        if key not in RUN_DETAILS:
            # Merged like the figures: a run of one phase that shares a
            # details key with others (``fanout``: the ceiling's sweep and
            # cassandra-stress) must not drop what the others recorded.
            details[key] = _merge_figures(details[key], value) if key in details else value
    entry = {k: run_details[k] for k in RUN_DETAILS if k in run_details and k != "plan"}
    entry["phases"] = phases
    entry["machine"] = run.get("machine")
    entry["peak_rss_mb"] = run.get("peak_rss_mb")
    details["partial_runs"] = [*(details.get("partial_runs") or []), entry]
    doc["details"] = details
    return doc


# --- writing -----------------------------------------------------------------------


def finalize(doc: dict[str, Any]) -> dict[str, Any]:
    """Add the evaluated targets to the document (in place) and return it."""
    doc["targets"] = {t.key: t.as_json() for t in evaluate_targets(doc)}
    return doc


def write_results(doc: dict[str, Any], out_dir: Path, now: datetime) -> tuple[Path, Path]:
    """Write ``latest.json`` and ``<YYYY-MM-DD>T<HHMM>.json`` into ``out_dir``.

    Raises ``ValueError`` naming the missing keys if the document does not
    satisfy the schema; nothing is written then."""
    missing = missing_keys(doc)
    if missing:
        raise ValueError(f"results lack required keys: {', '.join(missing)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, indent=2, sort_keys=False, allow_nan=False) + "\n"
    latest = out_dir / "latest.json"
    dated = out_dir / f"{now.strftime('%Y-%m-%dT%H%M')}.json"
    dated.write_text(text)
    latest.write_text(text)
    return latest, dated
