"""``LocalInfra``: the public face of the launcher. Checks prerequisites,
fetches, starts (reusing engines that already answer), stops, reports status
and versions of the Cassandra + Kafka pair -- or, with ``nodes > 1``
(``FANLINE_INFRA_NODES``), of a cluster of that many Cassandra nodes and
Kafka brokers on 127.0.0.11... -- under an inter-process lock on
``<state>/.lock``; stops, kills, pauses and restarts single cluster nodes
for fault tests. Its command lines for nodetool and cassandra-stress come
from the ``tools`` mixin. All public methods are idempotent."""

from __future__ import annotations

import contextlib
import fcntl
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from .cassandra import _Cassandra
from .config import InfraConfig
from .engine import _Engine
from .errors import EngineStartError, InfraError, InfraUnavailable
from .kafka import _Kafka
from .probes import kafka_live_brokers
from .process import _signal_group, _wait_for
from .secure import SecureMaterial
from .tools import CassandraTools


def _java_major(java: str) -> int:
    """Major version of a java executable (``java -version`` output)."""
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        raise InfraUnavailable(f"cannot parse `{java} -version` output: {out.stderr.strip()!r}")
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


class LocalInfra(CassandraTools):
    """Manage the local Cassandra + Kafka pair. All public methods are idempotent."""

    def __init__(self, config: InfraConfig | None = None, log: Callable[[str], None] | None = None) -> None:
        self.config = config or InfraConfig.from_env()
        cfg = self.config
        numbers = range(1, cfg.nodes + 1) if cfg.clustered else range(0, 1)
        self.cassandra_nodes = [_Cassandra(cfg, i) for i in numbers]
        self.kafka_nodes = [_Kafka(cfg, i) for i in numbers]
        # The single engine, or a cluster's first node (addresses, versions, tools).
        self.cassandra = self.cassandra_nodes[0]
        self.kafka = self.kafka_nodes[0]
        self._log = log or (lambda msg: print(f"[infra] {msg}", file=sys.stderr, flush=True))
        self._lock_depth = 0
        self._java_warned = False
        self._lock_fh: TextIO | None = None
        #: seconds each engine took to become ready on the last start (0.0 = reused)
        self.startup_seconds: dict[str, float] = {}

    # -- addresses -------------------------------------------------------------------
    @property
    def cassandra_contact(self) -> str:
        """``host:port`` of the CQL native transport, e.g. ``127.0.0.1:9042``."""
        return self.cassandra.address

    @property
    def kafka_bootstrap(self) -> str:
        """Kafka ``bootstrap.servers`` value, e.g. ``127.0.0.1:9092`` (every broker of a cluster)."""
        return ",".join(k.address for k in self.kafka_nodes)

    @property
    def cassandra_hosts(self) -> str:
        """``FANLINE_CASSANDRA_HOSTS`` value: every node's address, comma-separated."""
        return ",".join(c.host for c in self.cassandra_nodes)

    def settings_env(self) -> dict[str, str]:
        """The services' settings that point them at these engines (``infra env``):
        contact points, CQL port, bootstrap servers and, for a cluster, RF 3."""
        env = {
            "FANLINE_CASSANDRA_HOSTS": self.cassandra_hosts,
            "FANLINE_CASSANDRA_PORT": str(self.config.cassandra_port),
            "FANLINE_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
        }
        if self.config.clustered:
            rf = str(min(3, self.config.nodes))
            env.update({"FANLINE_CASSANDRA_RF": rf, "FANLINE_TOPIC_RF": rf})
        if self.config.secure:
            env.update(SecureMaterial(self.config.state_dir, self.config.java).settings_env())
        return env

    def node(self, kind: str, number: int) -> _Engine:
        """Cluster node ``number`` (1-based) of ``kind`` (``cassandra``/``kafka``)."""
        nodes: list[_Engine] = list(self.cassandra_nodes if kind == "cassandra" else self.kafka_nodes)
        for engine in nodes:
            if engine.node == number or (engine.node == 0 and number == 1):
                return engine
        raise InfraError(f"no {kind} node {number} (nodes={self.config.nodes})")

    @property
    def state_dir(self) -> Path:
        return self.config.state_dir

    # -- locking ---------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Inter-process lock on ``<state>/.lock`` (re-entrant within this object)."""
        if self._lock_depth == 0:
            self._ensure_state_dir()
            fh = open(self.config.state_dir / ".lock", "a+")
            fcntl.flock(fh, fcntl.LOCK_EX)
            self._lock_fh = fh
        self._lock_depth += 1
        try:
            yield
        finally:
            self._lock_depth -= 1
            if self._lock_depth == 0 and self._lock_fh is not None:
                held, self._lock_fh = self._lock_fh, None
                fcntl.flock(held, fcntl.LOCK_UN)
                held.close()

    def _ensure_state_dir(self) -> None:
        """Create the state dir; it ignores itself in git (no repo-level .gitignore needed)."""
        self.config.state_dir.mkdir(parents=True, exist_ok=True)
        ignore = self.config.state_dir / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# generated by deploy/local/infra: runtime state, never commit\n*\n")

    # -- prerequisites / fetch -------------------------------------------------------
    def _engines(self, only: str | None = None) -> list[_Engine]:
        engines: list[_Engine] = [*self.cassandra_nodes, *self.kafka_nodes]
        return [e for e in engines if only in (None, e.kind, e.name)]

    def check_prerequisites(self, need_mvn: bool | None = None) -> None:
        """Raise :class:`InfraUnavailable` unless java 17+ (and mvn, if a fetch is needed) exist.

        ``need_mvn=None`` means "only if some engine's jars are not cached yet".
        """
        if not sys.platform.startswith("linux") or not Path("/proc/self/cmdline").exists():
            raise InfraUnavailable("deploy/local/infra needs Linux (/proc, process groups)")
        java = self.config.java
        if shutil.which(java) is None:
            raise InfraUnavailable(f"java not found ({java!r}); install OpenJDK 17 or set JAVA_HOME/FANLINE_JAVA")
        major = _java_major(java)
        if major < 17:
            raise InfraUnavailable(f"{java} is Java {major}; Kafka 4.x and this setup need Java 17")
        if major > 17 and not self._java_warned:
            self._java_warned = True
            self._log(f"warning: {java} is Java {major}; Cassandra 5.0 supports Java 11 and 17 only")
        if need_mvn is None:
            need_mvn = not all(e.is_fetched() for e in self._engines())
        if need_mvn and shutil.which(self.config.mvn) is None:
            raise InfraUnavailable(
                f"mvn not found ({self.config.mvn!r}) and the engine jars are not cached in "
                f"{self.config.state_dir}; install Maven or set FANLINE_MVN"
            )

    def fetch(self, only: str | None = None) -> None:
        """Download (via Maven, ~/.m2 cache) the jars of each engine not fetched yet."""
        with self._locked():
            pending = [e for e in self._engines(only) if not e.is_fetched()]
            if not pending:
                return
            self.check_prerequisites(need_mvn=True)
            for engine in pending:
                engine.fetch(self.config.mvn, self._log)

    # -- lifecycle -------------------------------------------------------------------
    def _start(self, engines: list[_Engine], fresh: bool = False) -> None:
        with self._locked():
            self.check_prerequisites()
            self.fetch()
            if fresh:
                for engine in engines:
                    engine.stop(self.config.stop_timeout)
                    engine.wipe_data()
                    self._log(f"{engine.name}: data wiped")
            waiting: list[tuple[_Engine, float]] = []
            to_launch: list[_Engine] = []
            for engine in engines:
                timeout = self.config.cassandra_start_timeout if engine.kind == "cassandra" else self.config.kafka_start_timeout
                if engine.running():
                    if engine.ready():
                        self.startup_seconds[engine.name] = 0.0
                        continue
                    self._log(f"{engine.name} is running but not answering yet; waiting")
                else:
                    to_launch.append(engine)
                waiting.append((engine, timeout))
            for engine in to_launch:  # fail before launching anything if a port is taken
                engine.check_ports()
            try:
                for engine in to_launch:
                    self._log(f"starting {engine.name} {engine.version} on {engine.address}")
                    engine.launch()
                self._await(waiting)
                if any(e.kind == "kafka" for e in engines):
                    self._await_brokers()
            except (EngineStartError, OSError, subprocess.SubprocessError):
                for engine, _ in waiting:
                    with contextlib.suppress(InfraError):
                        engine.stop(self.config.stop_timeout)
                raise

    def _await(self, waiting: list[tuple[_Engine, float]]) -> None:
        """Wait for several launched engines at once, recording each one's time to ready."""
        t0 = time.monotonic()
        pending = {engine.name: (engine, timeout) for engine, timeout in waiting}

        def poll() -> bool:
            for name, (engine, _) in list(pending.items()):
                if engine.ready():
                    self.startup_seconds[name] = time.monotonic() - t0
                    self._log(f"{name} ready in {self.startup_seconds[name]:.1f}s")
                    del pending[name]
            return not pending

        def abort() -> str | None:
            elapsed = time.monotonic() - t0
            for engine, timeout in pending.values():
                reason = engine.exit_reason()
                if reason:
                    return engine.failure_report(reason)
                if elapsed > timeout:
                    return engine.failure_report(f"{engine.name} did not answer on {engine.address} within {timeout:.0f}s")
            return None

        longest = max((t for _, t in waiting), default=0.0) + 5.0
        if not _wait_for(poll, longest, interval=0.5, abort=abort):
            raise EngineStartError(abort() or "timed out waiting for engines")

    def _await_brokers(self) -> None:
        """Wait until every running broker of a cluster is registered (unfenced):
        a broker answers before the controller has admitted it."""
        if not self.config.clustered:
            return
        want = sum(1 for k in self.kafka_nodes if k.running())

        def all_live() -> bool:
            for k in self.kafka_nodes:
                try:
                    return kafka_live_brokers(k.host, self.config.kafka_port, timeout=5.0) >= want
                except (OSError, ConnectionError, ValueError):
                    continue
            return False

        if not _wait_for(all_live, self.config.kafka_start_timeout, interval=0.5):
            raise EngineStartError(f"kafka: fewer than {want} live brokers after {self.config.kafka_start_timeout:.0f}s")

    def start(self, fresh: bool = False) -> None:
        """Fetch if needed and start all engines (reusing any that already answer)."""
        self._start(self._engines(), fresh=fresh)

    def start_cassandra(self, fresh: bool = False) -> None:
        """Start (or reuse) Cassandra only (every node of a cluster)."""
        self._start(self._engines("cassandra"), fresh=fresh)

    def start_kafka(self, fresh: bool = False) -> None:
        """Start (or reuse) Kafka only. Existing topics/messages are kept unless ``fresh``."""
        self._start(self._engines("kafka"), fresh=fresh)

    def _stop_all(self, engines: list[_Engine]) -> None:
        with self._locked():
            pending = [(engine, engine.request_stop()) for engine in engines]
            for engine, pids in pending:
                engine.wait_stopped(pids, self.config.stop_timeout)
                if pids:
                    self._log(f"{engine.name} stopped")

    def stop(self) -> None:
        """Stop all engines (signalled together, then awaited); leaves no process behind."""
        self._stop_all([*self.kafka_nodes, *self.cassandra_nodes])

    def stop_cassandra(self) -> None:
        self._stop_all(list(self.cassandra_nodes))

    def stop_kafka(self) -> None:
        """Stop Kafka only (cleanly, so its data is intact for the next :meth:`start_kafka`)."""
        self._stop_all(list(self.kafka_nodes))

    # -- single nodes (fault injection) -----------------------------------------------
    def start_node(self, kind: str, number: int) -> float:
        """Start (or reuse) one node; returns the seconds it took to answer."""
        engine = self.node(kind, number)
        self._start([engine])
        return self.startup_seconds.get(engine.name, 0.0)

    def stop_node(self, kind: str, number: int) -> None:
        """Stop one node cleanly (SIGTERM: Cassandra drains, a broker hands over leadership)."""
        with self._locked():
            self.node(kind, number).stop(self.config.stop_timeout)

    def signal_node(self, kind: str, number: int, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` to one node's process group (SIGKILL: a crash; SIGSTOP/SIGCONT:
        a pause, e.g. a long GC or a frozen VM). Returns the pid; raises if not running."""
        engine = self.node(kind, number)
        pid = engine.pid()
        if pid is None:
            raise InfraError(f"{engine.name} is not running")
        _signal_group(pid, sig)
        if sig == signal.SIGKILL:
            engine.wait_stopped({pid}, 15.0)
        return pid

    def is_running(self) -> bool:
        """True if both engines are running *and* answering on their protocols."""
        return all(e.ready() for e in self._engines())

    def status(self) -> dict[str, dict[str, object]]:
        """Per-engine ``{"pid", "running", "answering", "address", "version"}``."""
        out: dict[str, dict[str, object]] = {}
        for engine in self._engines():
            pid = engine.pid()
            answering = pid is not None and engine.ready()
            out[engine.name] = {
                "kind": engine.kind,
                "pid": pid,
                "running": pid is not None,
                "answering": answering,
                "address": engine.address,
                "configured_version": engine.version,
            }
        return out

    def versions(self) -> dict[str, str]:
        """``{"cassandra": ..., "kafka": ...}``: from the running engines when possible,
        else the configured versions."""
        return {
            "cassandra": self.cassandra.running_version() or self.config.cassandra_version,
            "kafka": self.kafka.running_version() or self.config.kafka_version,
        }

    def log_paths(self) -> dict[str, list[Path]]:
        return {e.name: [e.main_log, e.stdout_log] for e in self._engines()}
