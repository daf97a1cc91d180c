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
