"""Process control for the benchmark: the isolated system (``BenchSystem``:
core services, extra fan-out workers and tweet-store replicas, each with its
own port and environment), the synchronous baseline endpoint, and stopping a
child process. Peak RSS is ``rss``, metric scraping ``prometheus``, py-spy
``profiling``.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

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
        env = {**self.env(), **self.role_env(name), **self.env_overrides.get(name, {}), **(env or {})}
        self.procs[name] = subprocess.Popen(
            argv,
            env=env,
            cwd=self.data_dir,
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            preexec_fn=_system.child_setup(self.nice_of(name)),
        )
        if out is not None:
            os.close(out)

    def start_core(self, timeout: float = 180) -> None:
        """social-graph, tweet-store (and the fan-out replica) and the gateway (no worker yet)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.check_ports_free()
        core = tuple(n for n in self.services() if n != WORKER)
        try:
            for name in core:
                self.start_service(name)
            self.wait_ready(timeout, services=core)
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

    def start_workers(
        self, count: int, timeout: float = 120, env_for: Callable[[int], dict[str, str]] | None = None
    ) -> list[str]:
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


def spawn_baseline(
    python: str,
    port: int,
    keyspace: str,
    social_graph_url: str,
    cassandra: str,
    concurrency: int,
    log_path: Path,
    batch_rows: int = 1,
) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [
                python,
                "-m",
                "bench.baseline",
                "--port",
                str(port),
                "--keyspace",
                keyspace,
                "--social-graph-url",
                social_graph_url,
                "--cassandra",
                cassandra,
                "--concurrency",
                str(concurrency),
                "--batch-rows",
                str(batch_rows),
            ],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_system._die_with_parent,
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
