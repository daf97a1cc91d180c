"""Service processes for the benchmark: the isolated system, extra fan-out
workers, the baseline endpoint, peak-RSS polling, metric scraping and py-spy.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "deploy" / "local"))

import system as _system  # noqa: E402
from system import MODULES, System  # noqa: E402

WORKER = "fanout-worker"
# One service credential for the whole benchmark run, in this process's
# environment so that the system's services (System reads it) and the sync
# baseline (a child process, which calls social-graph) share it.
os.environ.setdefault("FANLINE_INTERNAL_TOKEN", secrets.token_urlsafe(32))
# The benchmark drives thousands of requests per user and per address from
# one machine: limits stay on (their cost is measured) but far above that load.
BENCH_RATE_LIMITS = {
    "FANLINE_RATE_LIMIT_PER_USER": "1000000000 per minute",
    "FANLINE_RATE_LIMIT_PER_ADDRESS": "1000000000 per minute",
    "FANLINE_RATE_LIMIT_FAILED_LOGINS_PER_ADDRESS": "1000000000 per minute",
    "FANLINE_RATE_LIMIT_FAILED_LOGINS_PER_USERNAME": "1000000000 per minute",
}


@dataclass
class BenchSystem(System):
    """``System`` whose processes run in ``data_dir`` (faust writes its
    ``<app id>-data`` directory into the working directory) and which can
    run several fan-out workers, each with its own health/metrics port."""

    worker_ports: dict[str, int] = field(default_factory=dict)
    env_overrides: dict[str, dict[str, str]] = field(default_factory=dict)
    replica_ports: dict[str, int] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        # An experiment's own extra_env still wins.
        limits = {k: v for k, v in BENCH_RATE_LIMITS.items() if k not in self.extra_env}
        return {**super().env(), **limits}

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        out = self._log(name)
        env = {**self.env(), **self.env_overrides.get(name, {}), **(env or {})}
        self.procs[name] = subprocess.Popen(
            argv, env=env, cwd=self.data_dir, stdout=out, stderr=subprocess.STDOUT if out else None,
            preexec_fn=_system._die_with_parent,
        )
        if out is not None:
            os.close(out)

    def start_core(self, timeout: float = 180) -> None:
        """social-graph, tweet-store and the gateway (no worker yet)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.check_ports_free()
        try:
            for name in ("social-graph", "tweet-store", "api"):
                self.start_service(name)
            self.wait_ready(timeout, services=("social-graph", "tweet-store", "api"))
        except BaseException:
            self.stop()
            raise

    def worker_name(self, index: int) -> str:
        return WORKER if index == 0 else f"{WORKER}-{index + 1}"

    def worker_port(self, index: int) -> int:
        return self.ports[WORKER] if index == 0 else self.base_port + 10 + index

    def spawn_workers(self, count: int, env_for: Callable[[int], dict[str, str]] | None = None) -> list[str]:
        """Start ``count`` worker processes at once (not waiting);
        ``env_for(i)``: extra environment of worker ``i``."""
        names = []
        for i in range(count):
            name = self.worker_name(i)
            port = self.worker_port(i)
            self.env_overrides[name] = {**(env_for(i) if env_for else {}), "FANLINE_WORKER_PORT": str(port)}
            self.worker_ports[name] = port
            self._spawn(name, [self.python, "-m", MODULES[WORKER]])
            names.append(name)
        return names

    def start_workers(self, count: int, timeout: float = 120,
                      env_for: Callable[[int], dict[str, str]] | None = None) -> list[str]:
        """Start ``count`` workers and wait until each has joined the group
        (its /readyz answers 200)."""
        names = self.spawn_workers(count, env_for)
        deadline = time.monotonic() + timeout
        for name in names:
            url = f"http://127.0.0.1:{self.worker_ports[name]}/readyz"
            while not _system._http_ok(url):
                proc = self.procs.get(name)
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} during start-up")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} not ready after {timeout:.0f}s")
                time.sleep(0.2)
        return names

    def running_workers(self) -> list[str]:
        return [n for n, p in self.procs.items() if n.startswith(WORKER) and p.poll() is None]

    def stop_workers(self) -> None:
        for name in self.running_workers():
            self.stop_service(name)

    # extra tweet-store processes (the latency-scaling phase) --------------------
    def start_replicas(self, count: int, env: dict[str, str], timeout: float = 120) -> list[str]:
        """Start ``count`` extra tweet-store processes on ports base+40.. with
        ``env`` on top of the system's, and wait until each is ready."""
        names = []
        for i in range(count):
            name, port = f"tweet-store-r{i + 1}", self.base_port + 40 + i
            self.env_overrides[name] = {**env, "FANLINE_TWEET_STORE_PORT": str(port)}
            self.replica_ports[name] = port
            self._spawn(name, [self.python, "-m", MODULES["tweet-store"]])
            names.append(name)
        deadline = time.monotonic() + timeout
        for name in names:
            while not _system._http_ok(f"{self.replica_url(name)}/readyz"):
                proc = self.procs.get(name)
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} during start-up")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} not ready after {timeout:.0f}s")
                time.sleep(0.2)
        return names

    def replica_url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.replica_ports[name]}"

    def stop_replicas(self) -> None:
        for name in [n for n in self.procs if n.startswith("tweet-store-r")]:
            self.stop_service(name)

    def restart_service(self, name: str, env: dict[str, str], timeout: float = 120) -> None:
        """Stop a core service and start it again with ``env`` on top of the
        system's environment (replacing any earlier override)."""
        self.stop_service(name)
        self.env_overrides[name] = dict(env)
        self.start_service(name)
        self.wait_ready(timeout, services=(name,))

    def stop(self) -> None:
        self.stop_workers()
        self.stop_replicas()
        super().stop()

    def pids(self) -> dict[str, int]:
        return {n: p.pid for n, p in self.procs.items() if p.poll() is None}


def spawn_baseline(python: str, port: int, keyspace: str, social_graph_url: str, cassandra: str,
                   concurrency: int, log_path: Path, batch_rows: int = 1) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [python, "-m", "bench.baseline", "--port", str(port), "--keyspace", keyspace,
             "--social-graph-url", social_graph_url, "--cassandra", cassandra, "--concurrency", str(concurrency),
             "--batch-rows", str(batch_rows)],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_system._die_with_parent,
        )
    deadline = time.monotonic() + 60
    while not _system._http_ok(f"http://127.0.0.1:{port}/healthz"):
        if proc.poll() is not None:
            raise RuntimeError(f"sync baseline exited with {proc.returncode}; see {log_path}")
        if time.monotonic() > deadline:
            proc.kill()
            raise TimeoutError("sync baseline did not start")
        time.sleep(0.2)
    return proc


def stop_process(proc: subprocess.Popen[bytes] | None, timeout: float = 15) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


# --- peak RSS --------------------------------------------------------------------------


def vm_hwm_kib(pid: int) -> int | None:
    """The process's peak resident set (``VmHWM``), in KiB; None if gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def service_of(name: str) -> str:
    """'fanout-worker-3' -> 'fanout-worker'."""
    return WORKER if name.startswith(WORKER) else name


class RssMonitor:
    """Polls the ``VmHWM`` of every process of a ``BenchSystem`` (and any
    process added with ``watch``) and keeps the largest per service. Also
    samples the 1-minute load average."""

    def __init__(self, system: BenchSystem, interval_s: float = 0.5) -> None:
        self._system = system
        self._interval = interval_s
        self._extra: dict[str, int] = {}
        self.peak_kib: dict[str, int] = {}
        self.load_samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-monitor", daemon=True)

    def watch(self, name: str, pid: int) -> None:
        self._extra[name] = pid

    def start(self) -> None:
        self._thread.start()

    def poll(self) -> None:
        for name, pid in {**self._system.pids(), **self._extra}.items():
            kib = vm_hwm_kib(pid)
            if kib is not None:
                key = service_of(name)
                self.peak_kib[key] = max(self.peak_kib.get(key, 0), kib)

    def _loop(self) -> None:
        last_load = 0.0
        while not self._stop.wait(self._interval):
            self.poll()
            if time.monotonic() - last_load >= 5:
                last_load = time.monotonic()
                self.load_samples.append(os.getloadavg()[0])

    def stop(self) -> None:
        self.poll()
        self._stop.set()
        self._thread.join(5)

    def peak_mb(self) -> dict[str, float]:
        return {k: round(v / 1024, 1) for k, v in self.peak_kib.items()}


# --- metrics ------------------------------------------------------------------------------


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
            rest = series[len(f"{metric}_bucket"):]
            if rest.replace(mark + ",", "").replace("," + mark, "").replace(mark, "") == want:
                return series
    return None


def histogram_means(before: dict[str, float], after: dict[str, float], metric: str,
                    must_contain: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Mean (ms), count, and how many took over 25 ms (a histogram bucket
    bound: where the tail is) of each ``metric`` series between two scrapes."""
    rows = []
    for series, total in after.items():
        if not series.startswith(metric + "_sum"):
            continue
        labels = series[len(metric + "_sum"):]
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


# --- py-spy -----------------------------------------------------------------------------------


def py_spy() -> str | None:
    exe = Path(sys.executable).with_name("py-spy")
    return str(exe) if exe.exists() else shutil.which("py-spy")


def start_profile(pid: int, duration_s: int, out: Path, rate: int = 100) -> subprocess.Popen[bytes] | None:
    """``py-spy record --gil`` (only the thread holding the GIL, i.e. Python
    actually running) in raw collapsed-stack format; None if py-spy is missing."""
    exe = py_spy()
    if exe is None:
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [exe, "record", "--pid", str(pid), "--duration", str(duration_s), "--rate", str(rate), "--format", "raw",
         "--function", "--gil", "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")

# Innermost frame's file (as py-spy prints it: relative to its sys.path
# entry) -> a readable area name; first match wins.
AREAS: tuple[tuple[str, str], ...] = (
    ("cassandra/", "cassandra-driver (Python side)"),
    ("httpcore/_synchronization", "httpcore: current_async_library (failing `import sniffio`)"),
    ("importlib", "import machinery at run time"),
    ("_distutils_hack", "import machinery at run time"),
    ("httpx/", "httpx / httpcore (HTTP client)"),
    ("httpcore/", "httpx / httpcore (HTTP client)"),
    ("h11/", "h11 (HTTP/1.1 parsing)"),
    ("uvicorn/", "uvicorn"),
    ("starlette/", "starlette"),
    ("anyio/", "anyio"),
    ("faust/", "faust / mode"),
    ("mode/", "faust / mode"),
    ("aiokafka/", "aiokafka"),
    ("kafka/", "aiokafka"),
    ("prometheus_client/", "prometheus_client"),
    ("json/", "json (stdlib)"),
    ("asyncio/", "asyncio / uvloop event loop"),
    ("uvloop/", "asyncio / uvloop event loop"),
    ("fanline_", "fanline code"),
    ("argon2/", "argon2"),
    ("concurrent/", "threads"),
    ("threading.py", "threads"),
    ("queue.py", "threads"),
    ("uuid.py", "uuid (stdlib)"),
    ("urllib/", "urllib (URL parsing)"),
)
_SHARED = {p.name for p in (REPO / "shared" / "src" / "fanline_shared").glob("*.py")}


def _area(frame: str) -> str:
    m = _FRAME.match(frame)
    path = m.group("file") if m else frame
    for needle, name in AREAS:
        if needle in path:
            return name
    if "/" not in path and path in _SHARED:
        return "fanline code"
    return "other"


def _short(frame: str) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    file = m.group("file")
    parts = Path(file).parts
    for anchor in ("site-packages", "src", "lib"):
        if anchor in parts:
            idx = len(parts) - 1 - parts[::-1].index(anchor)
            file = "/".join(parts[idx + 1:])
            break
    return f"{m.group('func')} ({file})"


def summarize_profile(path: Path, top: int = 12) -> dict[str, Any]:
    """Samples, share by area of the innermost frame, and the top self-time
    functions from a py-spy raw (collapsed) file."""
    self_time: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = sniffio = 0
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {"samples": 0}
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f and not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += count
        if any(f.startswith("current_async_library (httpcore") for f in frames) and any(
                "importlib" in f or "_distutils_hack" in f for f in frames):
            sniffio += count
        leaf = frames[-1]
        self_time[_short(leaf)] += count
        areas[_area(leaf)] += count
        for f in set(frames):
            m = _FRAME.match(f)
            file = m.group("file") if m else f
            if "fanline_" in file or ("/" not in file and file in _SHARED):
                inclusive[_short(f)] += count
    if not total:
        return {"samples": 0}

    def pct(c: int) -> float:
        return round(100.0 * c / total, 1)

    return {
        "samples": total,
        "categories": [{"name": n, "percent": pct(c)} for n, c in areas.most_common(10)],
        "top_self": [{"function": n, "percent": pct(c)} for n, c in self_time.most_common(top)],
        "top_inclusive_fanline": [{"function": n, "percent": pct(c)} for n, c in inclusive.most_common(top)],
        "httpcore_sniffio_import_percent": pct(sniffio),
    }
