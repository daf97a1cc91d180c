"""One JVM engine living under ``<state>/<name>/``: fetching its jars with
Maven (atomically, into ``lib-<version>``), launching it in its own process
group, finding, probing and stopping it (SIGTERM, then SIGKILL after a
timeout). ``cassandra._Cassandra`` and ``kafka._Kafka`` fill in the
engine-specific parts."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .config import (
    _FETCH_MARKER,
    HOST,
    LOG_TAIL_LINES,
    InfraConfig,
)
from .errors import EngineStartError, InfraError
from .files import _tail
from .probes import _port_free
from .process import _find_pids, _pid_alive, _pid_listens_on, _proc_cmdline, _signal_group, _wait_for

_PR_SET_TIMERSLACK = 29  # prctl(2), Linux >= 2.6.28


def timer_slack(microseconds: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that sets the Linux timer slack of the process about to
    exec (every thread it creates inherits it), or None for the default.

    Why: at a steady, modest request rate (60/s on two cores) most of
    Cassandra's CPU was its shared thread pools *spin-waiting* between
    requests: an idle ``SEPWorker`` parks for 10 µs at a time until its pool
    decides to stop it, some 10 ms later (``SEPWorker.doWaitSpin``; not
    configurable in 5.0), so every request that wakes the pools is followed
    by thousands of 10 µs sleeps on ``Native-Transport-Requests`` and
    ``ReadStage`` threads. With a timer slack of 500 µs the kernel may let
    each such sleep run up to 0.5 ms, so a spinning worker wakes ~50 times
    less often. Measured (issue 31, docs/benchmarks.md): Cassandra's CPU per
    1,000 requests of the standard mix 5.8 -> 2.0 CPU-s, request p50 and p99
    within the run-to-run noise; at 1 ms it fell to 1.7 but p99 rose by 5 ms.
    Only timed sleeps are affected: a request handed to a parked worker
    wakes it at once."""
    if microseconds <= 0 or not sys.platform.startswith("linux"):
        return None
    # Resolved here, before the fork: the child (of a launcher that may start
    # engines from several threads) only makes the call.
    prctl, nanoseconds = ctypes.CDLL(None, use_errno=True).prctl, ctypes.c_ulong(microseconds * 1000)

    def set_slack() -> None:
        prctl(_PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0)  # best effort: a failure keeps the default

    return set_slack


class _Engine:
    """One JVM engine (Cassandra or Kafka) living under ``<state>/<name>/``."""

    kind: str = ""  # "cassandra" or "kafka"
    main_class: str = ""

    def __init__(self, config: InfraConfig, node: int = 0) -> None:
        self.config = config
        #: 0 for the single-node engine, 1..n for a cluster's nodes
        self.node = node
        #: ``cassandra``/``kafka`` alone, ``cassandra2``/``kafka3`` in a cluster
        self.name = self.kind if node == 0 else f"{self.kind}{node}"
        self.host = config.host(node)
        self.home = config.state_dir / self.name
        # The jars are fetched once per kind and shared by a cluster's nodes.
        self.kind_home = config.state_dir / self.kind
        self.conf_dir = self.home / "conf"
        self.data_dir = self.home / "data"
        self.log_dir = self.home / "logs"
        self.pid_file = self.home / f"{self.name}.pid"
        self.stdout_log = self.log_dir / "stdout.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offsets: dict[Path, int] = {}

    # -- to be provided by subclasses -------------------------------------------------
    version: str  # set in the subclass __init__
    pom: Path  # fetch POM under deploy/local/<name>/
    main_log: Path  # the engine's own log file (system.log / server.log)

    def timer_slack_us(self) -> int:
        """The timer slack of this engine's threads (0: the kernel's default)."""
        return 0

    def maven_properties(self) -> dict[str, str]:
        """``-D`` properties passed to Maven when fetching."""
        raise NotImplementedError

    def ports(self) -> dict[str, int]:
        """Ports this engine binds, by description."""
        raise NotImplementedError

    def prepare(self) -> None:
        """Render configuration and perform one-time initialisation before launch."""
        raise NotImplementedError

    def command(self) -> list[str]:
        """Full java command line."""
        raise NotImplementedError

    def probe(self) -> bool:
        """True if *something* answers this engine's client protocol on its port."""
        raise NotImplementedError

    @property
    def client_port(self) -> int:
        raise NotImplementedError

    def ready(self) -> bool:
        """True if our own process is running, owns the client port and answers on it."""
        pid = self.pid()
        return pid is not None and _pid_listens_on(pid, self.client_port) and self.probe()

    @property
    def address(self) -> str:
        raise NotImplementedError

    # -- common ---------------------------------------------------------------------
    @property
    def lib_dir(self) -> Path:
        return self.kind_home / f"lib-{self.version}"

    @property
    def classpath(self) -> str:
        return str(self.lib_dir / "*")

    @property
    def markers(self) -> list[str]:
        """JVM arguments that identify *our* process for this state dir unambiguously."""
        return [f"-Dfanline.engine={self.name}", f"-Dfanline.state={self.config.state_dir}"]

    def is_fetched(self) -> bool:
        marker = self.lib_dir / _FETCH_MARKER
        return marker.is_file() and any(self.lib_dir.glob("*.jar"))

    def fetch(self, mvn: str, log: Callable[[str], None]) -> None:
        """Resolve jars with Maven into ``lib_dir`` (atomic: temp dir, then rename)."""
        if self.is_fetched():
            return
        build = self.config.state_dir / "build" / self.kind
        staging = self.kind_home / f".lib-{self.version}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        build.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.pom, build / "pom.xml")
        cmd = [mvn, "-q", "-B", "-f", str(build / "pom.xml"), "dependency:copy-dependencies", f"-DoutputDirectory={staging}"]
        cmd += [f"-D{k}={v}" for k, v in self.maven_properties().items()]
        log(f"fetching {self.name} {self.version} with Maven ...")
        started = time.monotonic()
        try:
            result = subprocess.run(cmd, cwd=build, capture_output=True, text=True, timeout=self.config.fetch_timeout)
        except subprocess.TimeoutExpired as exc:
            raise InfraError(f"mvn timed out after {exc.timeout:.0f}s fetching {self.name}") from exc
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip().splitlines()[-LOG_TAIL_LINES:]
            raise InfraError(f"mvn failed fetching {self.name} {self.version}:\n  " + "\n  ".join(output))
        jars = sorted(staging.glob("*.jar"))
        if not jars:
            raise InfraError(f"mvn produced no jars for {self.name} in {staging}")
        (staging / _FETCH_MARKER).write_text(
            json.dumps({"version": self.version, "jars": len(jars), "fetched_at": time.time()}) + "\n"
        )
        shutil.rmtree(self.lib_dir, ignore_errors=True)
        staging.rename(self.lib_dir)
        log(f"fetched {self.name} {self.version}: {len(jars)} jars in {time.monotonic() - started:.1f}s")

    def pid(self) -> int | None:
        """PID of our running engine process (pid file, else /proc scan by marker)."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            pid = None
        if pid is not None and _pid_alive(pid) and all(m in _proc_cmdline(pid) for m in self.markers):
            return pid
        found = _find_pids([*self.markers, self.main_class])
        return found[0] if found else None

    def running(self) -> bool:
        return self.pid() is not None

    def check_ports(self) -> None:
        for what, port in self.ports().items():
            host = HOST if what == "JMX" else self.host  # local JMX binds 127.0.0.1
            if port and not _port_free(host, port):
                raise EngineStartError(
                    f"{self.name}: {what} port {host}:{port} is already in use by another process; "
                    f"stop it or choose another port (see FANLINE_* env vars)"
                )

    def launch(self) -> None:
        """Start the JVM in the background in its own session/process group."""
        self.check_ports()
        self.prepare()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        cmd = self.command()
        env = dict(os.environ)
        env.setdefault("MALLOC_ARENA_MAX", "4")
        (self.log_dir / "launch-command.txt").write_text(" \\\n  ".join(cmd) + "\n")
        self._log_offsets = {path: (path.stat().st_size if path.is_file() else 0) for path in (self.main_log, self.stdout_log)}
        with self.stdout_log.open("ab") as out:
            out.write(
                f"=== fanline infra: {self.name} started at {time.strftime('%Y-%m-%d %H:%M:%S')}"
                f" (command line in launch-command.txt)\n".encode()
            )
            out.flush()
            self._proc = subprocess.Popen(
                cmd,
                cwd=self.home,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                close_fds=True,
                preexec_fn=timer_slack(self.timer_slack_us()),
            )
        self.pid_file.write_text(f"{self._proc.pid}\n")

    def exit_reason(self) -> str | None:
        """Message if the process we launched has died, else None."""
        if self._proc is not None:
            code = self._proc.poll()
            if code is not None:
                return f"{self.name} exited with code {code} during startup"
            return None
        if not self.running():
            return f"{self.name} process is gone"
        return None

    def failure_report(self, headline: str) -> str:
        """``headline`` plus the last log lines written since this launch."""
        parts = [headline]
        for path in (self.main_log, self.stdout_log):
            lines = _tail(path, since=self._log_offsets.get(path, 0))
            if lines:
                parts.append(f"--- last {len(lines)} lines of {path} ---")
                parts.extend(lines)
            else:
                parts.append(f"--- (nothing new in {path}) ---")
        return "\n".join(parts)

    def request_stop(self) -> set[int]:
        """Send SIGTERM to our process group(s); returns the PIDs to wait for (maybe empty)."""
        pids = set(_find_pids(self.markers))
        pid = self.pid()
        if pid is not None:
            pids.add(pid)
        for p in pids:
            _signal_group(p, signal.SIGTERM)
        return pids

    def wait_stopped(self, pids: set[int], timeout: float) -> None:
        """Wait for ``pids`` to exit; SIGKILL their groups after ``timeout`` seconds."""
        if pids and not _wait_for(lambda: self._reap() or not any(_pid_alive(p) for p in pids), timeout, 0.2):
            for p in pids:
                _signal_group(p, signal.SIGKILL)
            if not _wait_for(lambda: self._reap() or not any(_pid_alive(p) for p in pids), 15.0, 0.2):
                raise InfraError(f"{self.name}: processes {sorted(pids)} survived SIGKILL")
        # Dead now; if we are not the parent, give the real parent/init a moment to reap the
        # zombie so `ps` right after a stop shows nothing. Best effort, never fails.
        _wait_for(lambda: self._reap() or not any(Path(f"/proc/{p}").exists() for p in pids), 5.0, 0.1)
        self._reap()
        self.pid_file.unlink(missing_ok=True)

    def stop(self, timeout: float) -> bool:
        """SIGTERM the process group, wait, SIGKILL after ``timeout``. True if something was stopped."""
        pids = self.request_stop()
        self.wait_stopped(pids, timeout)
        return bool(pids)

    def _reap(self) -> bool:
        """Collect our own child if it exited (avoids zombies). Always returns False."""
        if self._proc is not None and self._proc.poll() is not None:
            self._proc = None
        return False

    def wipe_data(self) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)
