"""What the processes say about themselves: the services' Prometheus pages (a scrape, and
what changed between two: counter increases, histogram quantiles and means) and /proc
(CPU seconds, memory, child processes, the machine)."""

from __future__ import annotations

import os
import platform
import re
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

Page = Mapping[str, float]
HTTP, CQL = "fanline_http_request_duration_seconds", "fanline_cassandra_statement_duration_seconds"
ENGINES = ("cassandra", "kafka")


def scrape(url: str) -> dict[str, float]:
    """Every sample of a page: {'name{labels}': value}; {} if it did not answer."""
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            lines = [ln.rpartition(" ") for ln in response.read().decode().splitlines() if ln and not ln.startswith("#")]
    except OSError:
        return {}
    return {series: float(v) for series, _, v in lines if re.fullmatch(r"[-+\w.]+", v)}


def total(page: Page, metric: str, *must_contain: str) -> float | None:
    """The sum of every sample of ``metric`` whose labels contain all of ``must_contain``."""
    found = [v for s, v in page.items() if s.split("{", 1)[0] == metric and all(m in s for m in must_contain)]
    return sum(found) if found else None


def increase(before: Page, after: Page, metric: str, *must_contain: str) -> float:
    return (total(after, metric, *must_contain) or 0.0) - (total(before, metric, *must_contain) or 0.0)


def quantile(before: Page, after: Page, metric: str, q: float, *must_contain: str) -> float | None:
    """Prometheus' ``histogram_quantile`` of the increase of every ``metric`` series with
    those labels (buckets summed per bound, linear inside one): seconds, or None."""
    buckets: dict[float, float] = {}
    for series, value in after.items():
        found = re.search(r'le="([^"]+)"', series) if all(m in series for m in must_contain) else None
        if found and series.startswith(f"{metric}_bucket{{"):
            buckets[float(found[1])] = buckets.get(float(found[1]), 0.0) + value - before.get(series, 0.0)
    if not (bounds := sorted(buckets)) or buckets[bounds[-1]] <= 0:
        return None
    rank, lower, below = q * buckets[bounds[-1]], 0.0, 0.0
    for le in bounds:
        if buckets[le] >= rank:  # +Inf: Prometheus answers the highest finite bound
            return lower if le == float("inf") else lower + (le - lower) * (rank - below) / ((buckets[le] - below) or 1.0)
        lower, below = le, buckets[le]
    return bounds[-1]


def means(before: Page, after: Page, metric: str, filters: Sequence[str] = ()) -> list[tuple[str, int, float]]:
    """(series, count, mean ms) of each ``metric`` series with any of ``filters`` (all if none)."""
    out = []
    for series, value in after.items():
        labels = series[len(metric + "_sum") :]
        count = after.get(f"{metric}_count{labels}", 0.0) - before.get(f"{metric}_count{labels}", 0.0)
        if series.startswith(metric + "_sum") and count > 0 and (not filters or any(f in labels for f in filters)):
            out.append((metric + labels, int(count), 1000 * (value - before.get(series, 0.0)) / count))
    return out


def statements(before: Mapping[str, Page], after: Mapping[str, Page]) -> dict[str, float]:
    """Cassandra statements run between two scrapes of every page, per statement name, each
    process counted once: the pages of services hosted in one process (``--colocate``) are one
    registry, told apart by ``process_start_time_seconds`` and the services it hosts
    (``fanline_build_info``). The start time alone (1/100 s) merged two processes of one run
    that started in the same tick (run ``3cea``: tweet-store's statements were lost)."""
    out: dict[str, float] = {}
    seen: set[tuple[float, frozenset[str]]] = set()
    for name, page in after.items():
        if (started := page.get("process_start_time_seconds")) is not None:
            identity = (started, frozenset(k for k in page if k.startswith("fanline_build_info{")))
            if identity in seen:
                continue
            seen.add(identity)
        for series, value in page.items():
            if series.startswith(CQL + "_count{") and (m := re.search(r'statement="([^"]+)"', series)):
                out[m[1]] = out.get(m[1], 0.0) + value - before.get(name, {}).get(series, 0.0)
    return {k: v for k, v in sorted(out.items()) if v > 0}


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces


def cpu_clocks(pids: Mapping[str, int]) -> dict[str, float]:
    """Each named process's user + system CPU-seconds so far (those gone left out)."""
    out = {}
    for name, pid in pids.items():
        try:
            out[name] = (int((f := _stat(pid))[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError):
            continue
    return out


def cpu_per_1k(before: Mapping[str, float], after: Mapping[str, float], requests: float) -> dict[str, float]:
    """CPU-seconds per 1,000 requests (or rows) of each process, and of Fanline's processes
    (``fanline``), the engines (``engines``) and ``all``."""
    out = {name: (after[name] - before.get(name, 0.0)) * 1000 / requests for name in sorted(after)} if requests > 0 else {}
    engines, fanline = (sum(v for k, v in out.items() if (k in ENGINES) == side) for side in (True, False))
    return out | ({"fanline": fanline, "engines": engines, "all": fanline + engines} if out else {})


def timer_slack_us(pid: int | None) -> float | None:
    """A process's Linux timer slack in µs, or None (no such process, not Linux)."""
    try:
        return int(Path(f"/proc/{pid}/timerslack_ns").read_text()) / 1000 if pid is not None else None
    except (OSError, ValueError):
        return None


def status_kib(pid: int, field: str) -> int | None:
    """``VmRSS`` or ``VmHWM`` of a process in KiB, or None."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        return next(int(ln.split()[1]) for ln in lines if ln.startswith(field + ":"))
    except (OSError, StopIteration, ValueError):
        return None


def children(pid: int) -> dict[int, str]:
    """The processes ``pid`` started: pid -> command line."""
    out = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int(_stat(int(entry.name))[1]) == pid:
                out[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
    return out


def machine_busy() -> tuple[float, float]:
    """(busy CPU ticks of the machine, all CPU ticks) from /proc/stat."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4], float(sum(ticks))  # idle, iowait


def machine() -> dict[str, Any]:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in cpuinfo if ln.startswith("model name")), "?")
    mem_gb = round(int(Path("/proc/meminfo").read_text().split("\n", 1)[0].split()[1]) / 2**20, 1)
    return {"cores": os.cpu_count(), "cpu_model": cpu, "memory_gb": mem_gb, "platform": platform.platform()}
