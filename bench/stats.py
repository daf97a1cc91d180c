"""Percentiles and small helpers (numpy's default interpolation, no numpy)."""

from __future__ import annotations

import math
from collections.abc import Sequence

# A p99 from fewer samples is one of the largest two values: one stray request decides it.
# Every percentile behind a judged comparison needs this many; every headline ratio this many rounds.
MIN_P99_SAMPLES, MIN_REPEATS = 300, 3


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linear between closest ranks; ValueError if empty."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), min(math.floor(rank) + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


def summary(values: Sequence[float]) -> dict[str, float]:
    """n, min, p50, p90, p99, max and mean; {} when empty."""
    if not values:
        return {}
    pct = {f"p{q}": percentile(values, q) for q in (50, 90, 99)}
    return {"n": len(values), "min": min(values), **pct, "max": max(values), "mean": sum(values) / len(values)}


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def interleaved(kinds: Sequence[str], repeats: int) -> list[tuple[int, str]]:
    """(round, kind) as A B A B A B: a drift in background load falls on every kind alike."""
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    return [(r, k) for r in range(repeats) for k in kinds]


def value_at(series: Sequence[tuple[float, float]], when: float) -> float | None:
    """A (time, value) series' value at ``when``, interpolated; None outside it."""
    prev: tuple[float, float] | None = None
    for t, v in series:
        if t == when:
            return v
        if t > when:
            return None if prev is None else prev[1] + (v - prev[1]) * (when - prev[0]) / (t - prev[0])
        prev = (t, v)
    return None


def crossing(series: Sequence[tuple[float, float]], level: float) -> float | None:
    """When a non-decreasing (time, value) series first reaches ``level``, interpolated."""
    prev: tuple[float, float] | None = None
    for t, v in series:
        if v >= level:
            return t if prev is None or v == prev[1] else prev[0] + (t - prev[0]) * (level - prev[1]) / (v - prev[1])
        prev = (t, v)
    return None
