"""Issue 18's part of the results document: the fair baselines, the repeated
ratios and the targets re-stated against them.

New keys (``FAIR_SCHEMA``, added to ``results.SCHEMA``; every old key stays):

* ``ratios.<name>``: a headline ratio measured ``plan.repeats`` times in one
  run, interleaved — ``median``, ``min``, ``max``, ``n``, ``values`` and, for
  percentile comparisons, ``min_samples``/``enough_samples`` (≥ 300 behind
  every p99). Targets are judged on the median.
* ``fair``: the fair opponents' own figures (the batched bare-driver ceiling,
  the worker, cassandra-stress's batched user profile, the cached and
  uncached raw reads).
* ``fanout_rows_per_s.cassandra_stress_rows``: the user profile's rows/s.
* ``post_fanout``: the post phase's offered vs delivered rows and the
  delivery lag of its own tweets.
* ``delivery_lag_reads_ms``: delivery lag at 1,000 followers and 5 tweets/s
  with 100 home reads/s running.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .results import Target

RATIOS = (
    "worker_vs_ceiling",
    "sync_vs_ours_p99_10000",
    "post_p99_10000_vs_0",
    "post_p99_running_vs_stopped",
    "fanout_speed_during_posts_vs_idle",
    "read_p50_vs_raw_cached",
    "read_p50_vs_raw_uncached",
)
_PCT = ("p50", "p99")

FAIR_SCHEMA: tuple[str, ...] = (
    *(f"ratios.{r}.{k}" for r in RATIOS for k in ("median", "min", "max", "n")),
    "fair.ceiling_rows_per_s",
    "fair.worker_rows_per_s",
    "fair.stress_rows_per_s",
    *(f"fair.timeline_read_ms.{side}.{p}" for side in ("api", "raw_cached", "raw_uncached") for p in _PCT),
    "fanout_rows_per_s.cassandra_stress_rows",
    "post_fanout.offered_rows",
    "post_fanout.delivered_rows",
    "post_fanout.lag_ms",
    *(f"delivery_lag_reads_ms.{k}" for k in ("followers", "rate_per_s", "reads_per_s", "reads_per_s_achieved", "p50", "p99")),
)


def empty_ratio() -> dict[str, Any]:
    return {"median": None, "min": None, "max": None, "n": None, "values": []}


def empty_fair() -> dict[str, Any]:
    """Issue 18's keys with every figure null (merged into ``empty_result``)."""
    pct: dict[str, Any] = {"p50": None, "p99": None}
    return {
        "ratios": {r: empty_ratio() for r in RATIOS},
        "fair": {
            "ceiling_rows_per_s": None,
            "worker_rows_per_s": None,
            "stress_rows_per_s": None,
            "timeline_read_ms": {"api": dict(pct), "raw_cached": dict(pct), "raw_uncached": dict(pct), "rate_per_s": None},
        },
        "post_fanout": {"offered_rows": None, "delivered_rows": None, "lag_ms": {}},
        "delivery_lag_reads_ms": {
            "followers": 1000,
            "rate_per_s": None,
            "reads_per_s": None,
            "reads_per_s_achieved": None,
            "posts_refused": None,
            "read_errors": None,
            "p50": None,
            "p99": None,
        },
    }


def _median(doc: Mapping[str, Any], name: str) -> float | None:
    value = ((doc.get("ratios") or {}).get(name) or {}).get("median")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _samples_note(doc: Mapping[str, Any], name: str, p99: bool) -> tuple[bool, str]:
    """(valid, note): a ratio measured fewer than three times, or a p99
    comparison with fewer than 300 samples on a side, is reported but not
    judged."""
    from .stats import MIN_P99_SAMPLES, MIN_REPEATS

    entry = (doc.get("ratios") or {}).get(name) or {}
    notes = []
    if p99 and entry.get("enough_samples") is False:
        notes.append(f"only {entry.get('min_samples')} samples behind a p99 (needs {MIN_P99_SAMPLES})")
    if entry.get("median") is not None and int(entry.get("n") or 0) < MIN_REPEATS:
        notes.append(f"measured {entry.get('n')} times (needs {MIN_REPEATS})")
    return not notes, "; ".join(notes)


def fair_targets(doc: Mapping[str, Any]) -> dict[str, Target]:
    """Issue 4's ratio targets re-stated against the fair baselines, judged
    on the median of the repeated ratio, plus issue 18's new ones; keyed by
    target key (the old keys replace their old definitions)."""
    from .results import Target

    def judged(
        key: str, text: str, ratio: str, bound: float, op: str, measured_label: str, bound_label: str, p99: bool = True
    ) -> Target:
        valid, note = _samples_note(doc, ratio, p99)
        return Target(key, text, _median(doc, ratio), bound, op, measured_label, bound_label, valid=valid, note=note)

    lag = doc.get("delivery_lag_reads_ms") or {}
    lag99 = lag.get("p99") if isinstance(lag.get("p99"), (int, float)) else None
    reads, achieved, rate = lag.get("reads_per_s"), lag.get("reads_per_s_achieved"), lag.get("rate_per_s")
    lag_notes = []
    if lag99 is not None:
        if not isinstance(rate, (int, float)) or rate < 5:
            lag_notes.append(f"posted at {rate} tweets/s (target: 5)")
        if not isinstance(achieved, (int, float)) or achieved < 0.9 * 100:
            lag_notes.append(f"{achieved} reads/s achieved of {reads} asked (target: 100)")
        if lag.get("posts_refused"):
            lag_notes.append(f"{lag['posts_refused']} posts refused with 503")
        if lag.get("read_errors"):
            lag_notes.append(f"{lag['read_errors']} reads failed")
    out = [
        judged(
            "post_p99_flat",
            "post p99 at 10,000 followers ≤ 1.5 × post p99 at 0 followers (median of the rounds)",
            "post_p99_10000_vs_0",
            1.5,
            "<=",
            "p99 at 10,000 ÷ p99 at 0, median",
            "1.5",
        ),
        judged(
            "sync_ratio",
            "synchronous-baseline p99 (batched like ours) ÷ ours at 10,000 followers ≥ 50 (median of the rounds)",
            "sync_vs_ours_p99_10000",
            50.0,
            ">=",
            "sync p99 ÷ ours p99, median",
            "50",
        ),
        judged(
            "worker_vs_driver",
            "fan-out worker rows/s ≥ 0.9 × the fair ceiling (bare driver, same batching, winning window; median of the rounds)",
            "worker_vs_ceiling",
            0.9,
            ">=",
            "worker ÷ fair ceiling, median",
            "0.9",
            p99=False,
        ),
        judged(
            "read_vs_raw",
            "home read p50 ≤ 1.5 × the fair raw read (same cache rules; median of the rounds)",
            "read_p50_vs_raw_cached",
            1.5,
            "<=",
            "API p50 ÷ cached raw p50, median",
            "1.5",
            p99=False,
        ),
        judged(
            "post_fanout_speed",
            "the fan-out runs at ≥ 50 % of its idle speed while posts are measured",
            "fanout_speed_during_posts_vs_idle",
            0.5,
            ">=",
            "fan-out rows/s during posts ÷ idle, median",
            "0.5",
            p99=False,
        ),
        judged(
            "post_p99_fanout",
            "post p99 with the fan-out running ≤ 1.5 × post p99 with the worker stopped (10,000 followers; median of the rounds)",
            "post_p99_running_vs_stopped",
            1.5,
            "<=",
            "p99 running ÷ p99 stopped, median",
            "1.5",
        ),
        Target(
            "lag_p99_reads",
            "delivery lag p99 ≤ 2 s at 1,000 followers and 5 tweets/s with 100 reads/s running",
            float(lag99) if lag99 is not None else None,
            2000.0,
            "<=",
            "lag p99 with reads (ms)",
            "2,000 ms",
            valid=not lag_notes,
            note="; ".join(lag_notes),
        ),
    ]
    return {t.key: t for t in out}
