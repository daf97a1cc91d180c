"""Memory of the benchmark's processes: each one's peak resident set
(``VmHWM``), polled by ``RssMonitor`` for every process of a ``BenchSystem``
during the whole run, with the 1-minute load average sampled alongside.
"""

from __future__ import annotations

import os
import threading
import time

from .procs import WORKER, BenchSystem


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
