"""Machinery of the single-node fault-injection suite (issue 14, item 3).

* ``FaultRow`` / ``record``: one row per fault, printed as ONE table at the
  end of the pytest run (``pytest_terminal_summary`` in ``conftest.py``) and
  written to ``build/fault-table.md`` for ``docs/reliability.md``.
* ``TimedLoad``: the cluster suite's steady ``Load`` (posters with an
  ``Idempotency-Key``, retried with the same key; readers), which also times
  every request and sorts the answers: ``refused`` (503 with Retry-After, the
  promised answer of a stalled dependency), ``unexpected`` (any other 5xx, a
  503 without Retry-After, an answer later than ``deadline_s``).
* ``latency_proxy``: ``bench/latency_proxy.py`` as a process, for the fixed
  latency between the services and Cassandra.
* small probes: a service's Prometheus counter, the resident memory of a
  service's process group, a consumer group's lag on several topics.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from deploy.local.system import System

from .client import Api
from .cluster import Load

REPO = Path(__file__).resolve().parents[2]
# tests/run_suite.py points the soak, run beside the rest, at a file of its own.
TABLE_FILE = Path(os.environ.get("FANLINE_FAULT_TABLE") or REPO / "build" / "fault-table.md")

#: Filled by the fault tests, printed once by ``pytest_terminal_summary``.
ROWS: list[FaultRow] = []


@dataclass
class FaultRow:
    """One fault and what it cost. ``sent``: HTTP requests, retries
    included. ``failed``: operations that never succeeded, plus answers that
    broke a promise (a 5xx other than a 503 with Retry-After, a request past
    its deadline). ``acked``: writes that got 2xx. ``lost`` / ``duplicated``:
    acknowledged writes missing / present more than once where they belong."""

    fault: str
    sent: int
    failed: int
    acked: int
    lost: int
    duplicated: int
    notes: str = ""


HEADER = (
    "| fault | requests sent | failed | acknowledged writes | lost | duplicated | notes |\n|---|---:|---:|---:|---:|---:|---|"
)


def table(rows: list[FaultRow]) -> str:
    lines = [HEADER]
    lines += [f"| {r.fault} | {r.sent} | {r.failed} | {r.acked} | {r.lost} | {r.duplicated} | {r.notes} |" for r in rows]
    return "\n".join(lines)


def record(row: FaultRow) -> None:
    """Add ``row`` to the run's table (recorded before a test's final
    assertions, so a failing fault still shows what it measured)."""
    ROWS.append(row)
    TABLE_FILE.parent.mkdir(parents=True, exist_ok=True)
    TABLE_FILE.write_text(table(ROWS) + "\n")


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


@dataclass
class TimedLoad(Load):
    """``Load`` that times each request and classifies its answer."""

    deadline_s: float = 2.0
    timings: list[tuple[str, int, float]] = field(default_factory=list)  # (request, status or 0, seconds)
    refused: int = 0
    transport_errors: int = 0
    unexpected: list[str] = field(default_factory=list)

    def start(self) -> TimedLoad:
        super().start()
        return self

    def _attempt(self, client: httpx.Client, method: str, path: str, **kw: Any) -> httpx.Response | None:
        deadline = time.monotonic() + self.op_deadline_s
        while True:
            with self._lock:
                self.sent += 1
            started = time.monotonic()
            try:
                r = client.request(method, path, **kw)
            except httpx.HTTPError as exc:
                took = time.monotonic() - started
                with self._lock:
                    self.timings.append((f"{method} {path}", 0, took))
                    self.transport_errors += 1
                    self.retried += 1
                    if took > self.deadline_s:
                        self.unexpected.append(f"{method} {path}: {exc!r} after {took:.2f} s")
            else:
                took = time.monotonic() - started
                with self._lock:
                    self.timings.append((f"{method} {path}", r.status_code, took))
                    if took > self.deadline_s:
                        self.unexpected.append(f"{method} {path}: {r.status_code} after {took:.2f} s")
                if r.status_code < 500 and r.status_code != 429:
                    return r
                with self._lock:
                    self.retried += 1
                    if r.status_code == 503 and r.headers.get("retry-after"):
                        self.refused += 1
                    else:
                        self.unexpected.append(f"{method} {path}: {r.status_code} {r.text[:160]}")
            if time.monotonic() > deadline:
                with self._lock:
                    self.failed += 1
                return None
            time.sleep(0.5)

    def slowest(self) -> tuple[str, int, float]:
        return max(self.timings, key=lambda t: t[2], default=("-", 0, 0.0))

    def quantiles(self, prefix: str) -> tuple[float, float, int]:
        """p50 and p99 (seconds) of the successful requests starting with ``prefix``."""
        values = [s for what, status, s in self.timings if what.startswith(prefix) and 200 <= status < 300]
        return percentile(values, 0.5), percentile(values, 0.99), len(values)


class CountingApi(Api):
    """The test client, counting every HTTP request it sends (``sent``)."""

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        self.sent = 0

        def count(_request: httpx.Request) -> None:
            self.sent += 1

        self.http.event_hooks["request"].append(count)


def metric_sum(system: System, service: str, name: str, labels: str = "") -> float:
    """Sum of the samples of ``name`` whose label text contains ``labels``."""
    text = httpx.get(system.metrics_url(service), timeout=5).text
    total = 0.0
    for m in re.finditer(rf"^{re.escape(name)}(\{{[^}}]*\}})? ([0-9.e+-]+)$", text, re.M):
        if labels in (m.group(1) or ""):
            total += float(m.group(2))
    return total


def group_rss_kib(pid: int) -> int:
    """Resident memory (KiB) of every process in ``pid``'s process group
    (each service runs in its own, ``processes._die_with_parent``)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            pgrp = int(stat.rsplit(")", 1)[1].split()[2])
            if pgrp != pid:
                continue
            for line in Path(f"/proc/{entry}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total


def service_rss_kib(system: System) -> dict[str, int]:
    return {name: group_rss_kib(proc.pid) for name, proc in system.procs.items() if proc.poll() is None}


def group_lag(bootstrap: str, group: str, topics: list[str]) -> int:
    """Total lag of consumer ``group`` over ``topics``: each partition's end
    offset minus the group's committed offset (aiokafka admin + consumer)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    async def run() -> int:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        await admin.start()
        await consumer.start()
        try:
            committed = await admin.list_consumer_group_offsets(group)
            await consumer.topics()  # a metadata fetch, so partitions_for_topic knows every topic
            parts = [TopicPartition(t, p) for t in topics for p in (consumer.partitions_for_topic(t) or set())]
            ends = await consumer.end_offsets(parts) if parts else {}
            lag = 0
            for tp, end in ends.items():
                meta = committed.get(tp)
                lag += end - (meta.offset if meta is not None and meta.offset >= 0 else 0)
            return lag
        finally:
            await consumer.stop()
            await admin.close()

    return asyncio.run(run())


def topics_of(system: System) -> tuple[str, str, str]:
    """(events, chunks, dead-letter) topic names of a real-engine system."""
    env = system.env()
    events = env["FANLINE_EVENTS_TOPIC"]
    return events, env.get("FANLINE_CHUNKS_TOPIC", events + ".chunks"), env["FANLINE_DLQ_TOPIC"]


@contextmanager
def latency_proxy(listen_port: int, target: str, delay_ms: float) -> Iterator[subprocess.Popen[bytes]]:
    """``bench.latency_proxy`` on 127.0.0.1:``listen_port`` forwarding to
    ``target`` with ``delay_ms`` added each way, until the block ends."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.latency_proxy",
            "--listen",
            f"127.0.0.1:{listen_port}",
            "--target",
            target,
            "--delay-ms",
            str(delay_ms),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                import socket

                with socket.create_connection(("127.0.0.1", listen_port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"latency proxy on {listen_port} did not start") from None
                time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def restore_engine(control: Any, kind: str, seconds: float = 600.0, attempts: int = 3) -> float:
    """Start engine ``kind`` ("kafka"/"cassandra") of the shared launcher
    again, patiently: on a starved machine a broker took 146 s to answer,
    past the launcher's 120 s default, and the launcher then stops what it
    started -- the engine would stay down for everyone. Returns the seconds
    it took."""
    patient = type(control)(dataclasses.replace(control.config, kafka_start_timeout=seconds, cassandra_start_timeout=seconds))
    started = time.monotonic()
    for attempt in range(attempts):
        try:
            (patient.start_kafka if kind == "kafka" else patient.start_cassandra)()
            return time.monotonic() - started
        except Exception:
            if attempt == attempts - 1:
                raise
    return time.monotonic() - started


class Background(threading.Thread):
    """A daemon thread whose exception is re-raised by :meth:`result`."""

    def __init__(self, target: Any, *args: Any) -> None:
        super().__init__(daemon=True)
        self._fn, self._args = target, args
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self._fn(*self._args)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            self.error = exc

    def result(self, timeout: float | None = None) -> Any:
        self.join(timeout)
        if self.error is not None:
            raise self.error
        return self.value
