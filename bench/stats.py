"""Percentiles and small summaries (no numpy needed)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation between
    closest ranks (numpy's default method). Raises ``ValueError`` if empty."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


def p50_p99(values: Sequence[float], digits: int = 2) -> dict[str, float] | None:
    """``{"p50": x, "p99": x}`` rounded, or None when there are no samples."""
    if not values:
        return None
    return {"p50": round(percentile(values, 50), digits), "p99": round(percentile(values, 99), digits)}


def summary(values: Sequence[float], digits: int = 2) -> dict[str, float | int] | None:
    """n, min, p50, p90, p99, max and mean, rounded; None when empty."""
    if not values:
        return None
    return {
        "n": len(values),
        "min": round(min(values), digits),
        "p50": round(percentile(values, 50), digits),
        "p90": round(percentile(values, 90), digits),
        "p99": round(percentile(values, 99), digits),
        "max": round(max(values), digits),
        "mean": round(sum(values) / len(values), digits),
    }


# --- repeated ratios (issue 18) ------------------------------------------------------------

# A p99 from fewer samples is the largest or second-largest value: one stray
# request decides it. Every p99 on either side of a comparison needs this many.
MIN_P99_SAMPLES = 300
# Every headline ratio is measured at least this often in one run.
MIN_REPEATS = 3


def interleaved(kinds: Sequence[str], repeats: int) -> list[tuple[int, str]]:
    """The run order of ``repeats`` rounds over ``kinds``: (round, kind) as
    A B A B A B — every kind once per round, rounds one after another — so a
    drift in background load falls on every kind alike, never AAA BBB."""
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    return [(r, k) for r in range(repeats) for k in kinds]


def spread(values: Sequence[float | None], digits: int = 3) -> dict[str, object]:
    """``{"median", "min", "max", "n", "values"}`` of the measured values
    (``None`` entries, unmeasured rounds, are dropped); the figures are null
    when nothing was measured. Targets are judged on the median."""
    got = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not got:
        return {"median": None, "min": None, "max": None, "n": 0, "values": []}
    return {
        "median": round(percentile(got, 50), digits),
        "min": round(min(got), digits),
        "max": round(max(got), digits),
        "n": len(got),
        "values": [round(v, digits) for v in got],
    }


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None when either is unmeasured or ``b`` is zero."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def repeated_ratio(
    numerators: Sequence[float | None], denominators: Sequence[float | None], samples: Sequence[int] = (), digits: int = 3
) -> dict[str, object]:
    """One headline ratio measured round by round: ``spread`` of
    numerator_i / denominator_i, plus ``min_samples`` (the fewest samples
    behind any percentile on either side, when given) and ``enough_samples``
    (whether that is at least ``MIN_P99_SAMPLES``)."""
    if len(numerators) != len(denominators):
        raise ValueError("one denominator per numerator")
    out = spread([ratio(a, b) for a, b in zip(numerators, denominators, strict=True)], digits)
    if samples:
        out["min_samples"] = min(samples)
        out["enough_samples"] = min(samples) >= MIN_P99_SAMPLES
    return out
