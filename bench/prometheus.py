"""Prometheus scraping for the benchmark: one metric's sum, every sample of
a page, and per-series histogram means (and the count over 25 ms) between
two scrapes of the services' ``/metrics``.
"""

from __future__ import annotations

import urllib.request
from typing import Any


def scrape(url: str, metric: str, timeout: float = 3.0) -> float | None:
    """The sum of every sample of ``metric`` on a Prometheus text page."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text = response.read().decode()
    except OSError:
        return None
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith(metric) and (len(line) == len(metric) or line[len(metric)] in " {"):
            try:
                total += float(line.rsplit(" ", 1)[1])
                found = True
            except ValueError:
                continue
    return total if found else None


def scrape_all(url: str, timeout: float = 3.0) -> dict[str, float]:
    """Every sample line of a Prometheus text page: {'name{labels}': value}."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text = response.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        try:
            out[series] = float(value)
        except ValueError:
            continue
    return out


def _bucket_series(scraped: dict[str, float], metric: str, labels: str, le: str) -> str | None:
    """The ``le`` bucket of the series with ``labels`` (prometheus-client puts
    ``le`` among the other labels in name order, not last)."""
    mark, want = f'le="{le}"', labels or "{}"
    for series in scraped:
        if series.startswith(f"{metric}_bucket{{") and mark in series:
            rest = series[len(f"{metric}_bucket") :]
            if rest.replace(mark + ",", "").replace("," + mark, "").replace(mark, "") == want:
                return series
    return None


def histogram_means(
    before: dict[str, float], after: dict[str, float], metric: str, must_contain: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """Mean (ms), count, and how many took over 25 ms (a histogram bucket
    bound: where the tail is) of each ``metric`` series between two scrapes."""
    rows = []
    for series, total in after.items():
        if not series.startswith(metric + "_sum"):
            continue
        labels = series[len(metric + "_sum") :]
        if must_contain and not any(m in labels for m in must_contain):
            continue
        count = after.get(f"{metric}_count{labels}", 0.0) - before.get(f"{metric}_count{labels}", 0.0)
        if count <= 0:
            continue
        mean = (total - before.get(series, 0.0)) / count
        row = {"series": f"{metric}{labels}", "count": int(count), "mean_ms": round(mean * 1000, 2)}
        bucket = _bucket_series(after, metric, labels, "0.025")
        if bucket is not None:
            row["over_25ms"] = int(count - (after[bucket] - before.get(bucket, 0.0)))
        rows.append(row)
    return rows
