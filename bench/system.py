"""The system under test, started through ``deploy.local.system``:
``BenchSystem`` is the launcher's ``System`` with what the scenarios vary
(several fan-out workers with their own metrics ports, extra tweet-store
replicas, a core service restarted with other settings); ``CliSystem`` is a
whole system started through a checkout's own ``deploy/local/system.py``
command line, the same way for this checkout and for ``--baseline-ref``
(``checkout``: a ``git worktree`` of the ref in ``bench/.refs/<sha>`` with its
own venv from its own ``make venv``, kept for later runs; remove one with
``git worktree remove --force bench/.refs/<sha>``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from deploy.local.system import MODULES, System, child_setup, http_ok, metrics_url_of

from . import probes

REPO = Path(__file__).resolve().parents[1]
WORKER = "fanout-worker"


def spawn(argv: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """A helper process, its output appended to ``log``, in a session of its own."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)


def wait_ready(url: str, proc: subprocess.Popen[bytes] | None, timeout: float, what: str) -> None:
    """Until ``url`` answers 200; raises if ``proc`` exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not http_ok(url):
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} during start-up")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout:.0f}s ({url})")
        time.sleep(0.2)


@dataclass
class BenchSystem(System):
    """``System`` whose processes run in ``data_dir`` (faust writes its state into the
    working directory), with per-process environment overrides."""

    worker_ports: dict[str, int] = field(default_factory=dict)
    overrides: dict[str, dict[str, str]] = field(default_factory=dict)
    peak_kib: dict[str, int] = field(default_factory=dict)  # the largest VmHWM of each service's processes

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        out, env = self._log(name), {**self.env(), **self.role_env(name), **self.overrides.get(name, {}), **(env or {})}
        stderr, setup = subprocess.STDOUT if out else None, child_setup(self.nice_of(name))
        self.procs[name] = subprocess.Popen(argv, env=env, cwd=self.data_dir, stdout=out, stderr=stderr, preexec_fn=setup)
        if out is not None:
            os.close(out)

    def start_core(self) -> None:
        """Everything but the worker (the scenarios start and stop workers)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.check_ports_free()
        try:
            for name in tuple(n for n in self.services() if n != WORKER):
                self.start_service(name)
            self.wait_ready(180, services=tuple(n for n in self.serving() if n != WORKER))
        except BaseException:
            self.stop()
            raise

    def start_workers(self, count: int, wait: bool = True, env_for: Callable[[int], dict[str, str]] | None = None) -> None:
        """``count`` workers at once (worker ``i`` with ``env_for(i)`` on top); if ``wait``, until each joined."""
        for i in range(count):
            name, port = (WORKER, self.ports[WORKER]) if i == 0 else (f"{WORKER}-{i + 1}", self.base_port + 10 + i)
            self.worker_ports[name] = port
            self.overrides[name] = {**(env_for(i) if env_for else {}), "FANLINE_WORKER_PORT": str(port)}
            self._spawn(name, [self.python, "-m", MODULES[WORKER]])
        for name in self.running_workers() if wait else ():
            wait_ready(f"http://127.0.0.1:{self.worker_ports[name]}/readyz", self.procs.get(name), 120, name)

    def running_workers(self) -> list[str]:
        return [n for n, p in self.procs.items() if n.startswith(WORKER) and p.poll() is None]

    def core_running(self) -> bool:
        """Whether the gateway runs (baseline_ref stops the whole system)."""
        return (api := self.procs.get("api")) is not None and api.poll() is None

    def stop_workers(self) -> None:
        for name in self.running_workers():
            self.stop_service(name)

    def start_replicas(self, count: int, env: dict[str, str]) -> list[str]:
        """``count`` extra tweet-store processes (ports base+40..) with ``env`` on top: their URLs, once ready."""
        for i in range(count):
            self.overrides[name := f"tweet-store-r{i + 1}"] = {**env, "FANLINE_TWEET_STORE_PORT": str(self.base_port + 40 + i)}
            self._spawn(name, [self.python, "-m", MODULES["tweet-store"]])
        urls = [f"http://127.0.0.1:{self.base_port + 40 + i}" for i in range(count)]
        for i, url in enumerate(urls):
            wait_ready(f"{url}/readyz", self.procs.get(f"tweet-store-r{i + 1}"), 120, f"tweet-store replica {i + 1}")
        return urls

    def stop_replicas(self) -> None:
        for name in [n for n in self.procs if n.startswith("tweet-store-r")]:
            self.stop_service(name)

    def restart_service(self, name: str, env: dict[str, str]) -> None:
        """A core service again with ``env`` on top (replacing any earlier override)."""
        self.stop_service(name)
        self.overrides[name] = dict(env)
        self.start_service(name)
        self.wait_ready(120, services=(name,))

    def note_peaks(self, *names: str) -> None:
        """Each process's high-water mark (``VmHWM``, kept by the kernel), read before it goes."""
        for name in names or list(self.procs):
            if (kib := probes.status_kib(self.procs[name].pid, "VmHWM")) is not None:
                service = WORKER if name.startswith(WORKER) else name
                self.peak_kib[service] = max(self.peak_kib.get(service, 0), kib)

    def stop_service(self, name: str, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
        self.note_peaks(*[name] if name in self.procs else [])
        super().stop_service(name, sig, timeout)

    def stop(self, timeout: float = 20) -> None:
        self.note_peaks()
        self.stop_workers()
        self.stop_replicas()
        super().stop(timeout)

    def pids(self) -> dict[str, int]:
        return {n: p.pid for n, p in self.procs.items() if p.poll() is None}

    def metrics_urls(self) -> dict[str, str]:
        """Process -> its /metrics: the gateway, the two stores and every worker."""
        ports = {s: self.ports[s] for s in ("api", "social-graph", "tweet-store")}
        ports |= {n: self.worker_ports.get(n, self.ports[WORKER]) for n in self.running_workers()}  # start(): one worker
        return {n: metrics_url_of(port) for n, port in ports.items()}


def metrics_url(port: int) -> str:
    """The /metrics of the process on ``port``: on its metrics port if that
    answers, else on ``port`` (a checkout from before metrics had a port)."""
    return metrics_url_of(port) if http_ok(metrics_url_of(port)) else f"http://127.0.0.1:{port}/metrics"


def checkout(ref: str, log: Callable[[str], None]) -> tuple[Path, str]:
    """``ref`` as a git worktree with its own venv (made once): (its root, the full sha)."""
    git = ["git", "-C", str(REPO)]
    sha = subprocess.check_output([*git, "rev-parse", "--verify", f"{ref}^{{commit}}"], text=True).strip()
    if not ((root := REPO / "bench" / ".refs" / sha[:12]) / ".git").exists():
        log(f"baseline ref: git worktree of {sha[:12]} in {root}")
        subprocess.run([*git, "worktree", "add", "--detach", str(root), sha], check=True, capture_output=True)
    if not (root / ".venv" / ".installed").exists():
        log(f"baseline ref: make venv in {root} (once)")
        subprocess.run(["make", "-C", str(root), "venv"], check=True, capture_output=True, timeout=1800)
    return root, sha


@dataclass
class CliSystem:
    """A whole system on the real engines: ``deploy/local/system.py --real`` of the checkout
    ``root`` run by its own venv; the services are that supervisor's children."""

    root: Path
    base_port: int
    env: dict[str, str]
    log: Path
    fanout_replica: bool = True
    background_nice: int = 10
    colocate: bool = False  # the stores in the gateway's (and the worker's) process
    proc: subprocess.Popen[bytes] | None = None

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.base_port}"

    def start(self, data_dir: Path, timeout: float = 240) -> None:
        python = str(venv) if (venv := self.root / ".venv" / "bin" / "python").exists() else sys.executable
        argv = [python, "deploy/local/system.py", "--real", "--base-port", str(self.base_port), "--data-dir", str(data_dir)]
        argv += ["--fanout-replica", "--background-nice", str(self.background_nice)] if self.fanout_replica else []
        argv += ["--colocate"] if self.colocate else []
        self.proc = spawn(argv, self.log, {**os.environ, **self.env}, self.root)
        for port in (self.base_port, self.base_port + 3):  # the gateway, then the worker (it joins last)
            wait_ready(f"http://127.0.0.1:{port}/readyz", self.proc, timeout, f"the system of {self.root}")

    def pids(self) -> dict[str, int]:
        """Service -> pid of each process the supervisor started (a second store: its fan-out replica;
        with ``colocate``, the gateway's and the worker's processes only)."""
        out: dict[str, int] = {}
        for pid, cmdline in sorted(probes.children(self.proc.pid).items()) if self.proc else ():
            if name := next((s for s, m in MODULES.items() if f"-m {m}" in cmdline), None):
                out[name if name not in out else f"{name}-fanout"] = pid
        return out

    def metrics_urls(self) -> dict[str, str]:
        """Each service's /metrics: on its metrics port (its port + 50) where the
        checkout serves one, else on its port (refs before issue 29)."""
        names = ("api", "social-graph", "tweet-store", WORKER)
        return {s: metrics_url(self.base_port + i) for i, s in enumerate(names)}

    def stop(self, timeout: float = 60) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # the supervisor stops its services
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
