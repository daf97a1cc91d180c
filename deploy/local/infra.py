#!/usr/bin/env python3
"""Run a real single-node Apache Cassandra and Apache Kafka on loopback, without Docker.

Both engines are fetched from Maven Central with Maven (cached in ``~/.m2`` and
copied once into the state directory) and run as plain background JVMs:

* Cassandra 5.0.x from ``org.apache.cassandra:cassandra-all`` and its dependencies
  (``org.apache.cassandra.service.CassandraDaemon``);
* Kafka 4.1.x from ``org.apache.kafka:kafka_2.13`` and its dependencies, in KRaft
  combined mode (``process.roles=broker,controller``), formatted once with
  ``kafka.tools.StorageTool``.

The module is stdlib-only and is both a library and a CLI::

    python3 deploy/local/infra.py fetch|up [--fresh]|down|status|versions|logs|env|nodetool

Library use (e.g. from a pytest fixture)::

    from infra import LocalInfra, InfraUnavailable
    infra = LocalInfra()
    infra.check_prerequisites()      # raises InfraUnavailable -> skip
    infra.start()                    # idempotent; reuses running engines
    infra.cassandra_contact          # "127.0.0.1:9042"
    infra.kafka_bootstrap            # "127.0.0.1:9092"
    infra.stop_kafka(); infra.start_kafka()   # broker outage; data survives
    infra.stop()

Readiness is checked over the real wire protocols: a CQL v4 OPTIONS/STARTUP/QUERY
exchange (``SELECT release_version FROM system.local``) for Cassandra, and
ApiVersions + Metadata (at least one live broker) for Kafka.

Environment variables (all optional):

``FANLINE_INFRA_DIR``               state directory (default ``<repo>/.infra``)
``FANLINE_CASSANDRA_VERSION``       default ``5.0.9``
``FANLINE_KAFKA_VERSION``           default ``4.1.1``
``FANLINE_CASSANDRA_PORT``          CQL native port, default 9042
``FANLINE_CASSANDRA_STORAGE_PORT``  inter-node port, default 7000
``FANLINE_CASSANDRA_JMX_PORT``      local JMX (nodetool) port, default 7199; 0 disables
``FANLINE_KAFKA_PORT``              PLAINTEXT broker port, default 9092
``FANLINE_KAFKA_CONTROLLER_PORT``   KRaft controller port, default 9093
``FANLINE_CASSANDRA_HEAP``          default ``1G``
``FANLINE_KAFKA_HEAP``              default ``512M``
``FANLINE_CASSANDRA_START_TIMEOUT`` seconds, default 240
``FANLINE_KAFKA_START_TIMEOUT``     seconds, default 120
``FANLINE_JAVA``                    java executable (default ``$JAVA_HOME/bin/java`` or ``java``)
``FANLINE_MVN``                     mvn executable (default ``mvn``)
``FANLINE_CASSANDRA_STRESS_JAR``    path to a ``stress.jar`` (cassandra-stress is not on Maven Central)
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TextIO

__all__ = [
    "EngineStartError",
    "InfraConfig",
    "InfraError",
    "InfraUnavailable",
    "LocalInfra",
    "cql_release_version",
    "kafka_live_brokers",
]

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
HOST = "127.0.0.1"

DEFAULT_CASSANDRA_VERSION = "5.0.9"
DEFAULT_KAFKA_VERSION = "4.1.1"
DEFAULT_LOG4J_VERSION = "2.24.3"

CASSANDRA_MAIN = "org.apache.cassandra.service.CassandraDaemon"
KAFKA_MAIN = "kafka.Kafka"
KAFKA_STORAGE_TOOL = "kafka.tools.StorageTool"
NODETOOL_MAIN = "org.apache.cassandra.tools.NodeTool"
STRESS_MAIN = "org.apache.cassandra.stress.Stress"

LOG_TAIL_LINES = 40
_FETCH_MARKER = ".fetch-complete"


# --------------------------------------------------------------------------- errors


class InfraError(RuntimeError):
    """Base class for everything this module raises on purpose."""


class InfraUnavailable(InfraError):
    """A prerequisite (java, mvn, Linux /proc, ...) is missing: callers may skip, not fail."""


class EngineStartError(InfraError):
    """An engine did not come up (crashed, timed out, port taken, ...)."""


# --------------------------------------------------------------------------- config


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise InfraError(f"{name}={raw!r} is not an integer") from exc


def _env_str(name: str, default: str) -> str:
    raw = os.environ.get(name, "").strip()
    return raw or default


@dataclasses.dataclass(frozen=True)
class InfraConfig:
    """Everything that parameterises the local engines; see :meth:`from_env`."""

    state_dir: Path
    cassandra_version: str = DEFAULT_CASSANDRA_VERSION
    kafka_version: str = DEFAULT_KAFKA_VERSION
    log4j_version: str = DEFAULT_LOG4J_VERSION
    cassandra_port: int = 9042
    cassandra_storage_port: int = 7000
    cassandra_jmx_port: int = 7199
    kafka_port: int = 9092
    kafka_controller_port: int = 9093
    cassandra_heap: str = "1G"
    kafka_heap: str = "512M"
    cassandra_start_timeout: float = 240.0
    kafka_start_timeout: float = 120.0
    stop_timeout: float = 60.0
    fetch_timeout: float = 1800.0
    java: str = "java"
    mvn: str = "mvn"

    @classmethod
    def from_env(cls, **overrides: object) -> InfraConfig:
        """Build a config from ``FANLINE_*`` environment variables; keyword args win."""
        state = os.environ.get("FANLINE_INFRA_DIR", "").strip()
        java_home = os.environ.get("JAVA_HOME", "").strip()
        default_java = str(Path(java_home) / "bin" / "java") if java_home else "java"
        values: dict[str, object] = dict(
            state_dir=Path(state).expanduser().resolve() if state else REPO_ROOT / ".infra",
            cassandra_version=_env_str("FANLINE_CASSANDRA_VERSION", DEFAULT_CASSANDRA_VERSION),
            kafka_version=_env_str("FANLINE_KAFKA_VERSION", DEFAULT_KAFKA_VERSION),
            log4j_version=_env_str("FANLINE_LOG4J_VERSION", DEFAULT_LOG4J_VERSION),
            cassandra_port=_env_int("FANLINE_CASSANDRA_PORT", 9042),
            cassandra_storage_port=_env_int("FANLINE_CASSANDRA_STORAGE_PORT", 7000),
            cassandra_jmx_port=_env_int("FANLINE_CASSANDRA_JMX_PORT", 7199),
            kafka_port=_env_int("FANLINE_KAFKA_PORT", 9092),
            kafka_controller_port=_env_int("FANLINE_KAFKA_CONTROLLER_PORT", 9093),
            cassandra_heap=_env_str("FANLINE_CASSANDRA_HEAP", "1G"),
            kafka_heap=_env_str("FANLINE_KAFKA_HEAP", "512M"),
            cassandra_start_timeout=float(_env_int("FANLINE_CASSANDRA_START_TIMEOUT", 240)),
            kafka_start_timeout=float(_env_int("FANLINE_KAFKA_START_TIMEOUT", 120)),
            java=_env_str("FANLINE_JAVA", default_java),
            mvn=_env_str("FANLINE_MVN", "mvn"),
        )
        values.update(overrides)
        if isinstance(values["state_dir"], str):
            values["state_dir"] = Path(str(values["state_dir"])).expanduser().resolve()
        return cls(**values)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- small helpers


def _render(template: Path, values: dict[str, object]) -> str:
    """Substitute ``@{name}`` placeholders outside ``#`` comment lines.

    Unknown placeholders are an error, so a template typo fails loudly.
    """

    def sub(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise InfraError(f"{template}: no value for placeholder @{{{key}}}")
        return str(values[key])

    lines = template.read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join(line if line.lstrip().startswith("#") else re.sub(r"@\{([a-z_]+)\}", sub, line)
                   for line in lines)


def _read_jvm_options(path: Path) -> list[str]:
    """Read a Cassandra-style ``*.options`` file: one flag per line, only lines starting with '-'."""
    flags: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("-"):
            flags.append(line)
    return flags


def _tail(path: Path, lines: int = LOG_TAIL_LINES, since: int = 0, width: int = 600) -> list[str]:
    """Last ``lines`` lines of a text file, only from byte offset ``since`` on.

    Reads backwards in blocks, so it is cheap on large logs; each line is cut
    to ``width`` characters (Cassandra logs multi-kilobyte config lines).
    """
    if not path.is_file():
        return []
    with path.open("rb") as fh:
        end = fh.seek(0, os.SEEK_END)
        start = min(max(since, 0), end)
        pos, data = end, b""
        while pos > start and data.count(b"\n") <= lines:
            step = min(65536, pos - start)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
    text = data.decode("utf-8", errors="replace")
    out = text.splitlines()[-lines:]
    return [ln if len(ln) <= width else ln[:width] + " [...]" for ln in out]


def _last_match(path: Path, pattern: str) -> str | None:
    """Return group 1 of the last line of ``path`` matching ``pattern`` (reads the whole file)."""
    if not path.is_file():
        return None
    regex = re.compile(pattern)
    found: str | None = None
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            m = regex.search(line)
            if m:
                found = m.group(1)
    return found


def _port_free(host: str, port: int) -> bool:
    """True if nothing is listening on / bound to ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by peer")
        buf += chunk
    return bytes(buf)


def _wait_for(
    predicate: Callable[[], bool],
    timeout: float,
    interval: float = 0.5,
    abort: Callable[[], str | None] | None = None,
) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` expires.

    ``abort`` is checked on every round; if it returns a message the wait stops
    early and an :class:`EngineStartError` with that message is raised.
    """
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if abort is not None:
            reason = abort()
            if reason:
                raise EngineStartError(reason)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(interval, remaining))


# --------------------------------------------------------------------------- wire probes


def _cql_string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack(">H", len(raw)) + raw


def _cql_request(sock: socket.socket, opcode: int, body: bytes, stream: int) -> tuple[int, bytes]:
    """Send one CQL v4 frame and return ``(opcode, body)`` of the response."""
    sock.sendall(struct.pack(">BBhBi", 0x04, 0x00, stream, opcode, len(body)) + body)
    _version, flags, _stream, resp_op, length = struct.unpack(">BBhBi", _recv_exact(sock, 9))
    payload = _recv_exact(sock, length)
    pos = 0
    if flags & 0x02:  # tracing id
        pos += 16
    if flags & 0x08:  # warnings: [string list]
        (n,) = struct.unpack_from(">H", payload, pos)
        pos += 2
        for _ in range(n):
            (ln,) = struct.unpack_from(">H", payload, pos)
            pos += 2 + ln
    if flags & 0x04:  # custom payload: [bytes map]
        (n,) = struct.unpack_from(">H", payload, pos)
        pos += 2
        for _ in range(n):
            (ln,) = struct.unpack_from(">H", payload, pos)
            pos += 2 + ln
            (bl,) = struct.unpack_from(">i", payload, pos)
            pos += 4 + max(bl, 0)
    body = payload[pos:]
    if resp_op == 0x00:  # ERROR
        code, msg_len = struct.unpack_from(">iH", body, 0)
        message = body[6 : 6 + msg_len].decode("utf-8", errors="replace")
        raise ConnectionError(f"CQL error 0x{code:04x}: {message}")
    return resp_op, body


def _cql_skip_option(body: bytes, pos: int) -> int:
    """Skip one CQL ``[option]`` type descriptor (enough for system.local columns)."""
    (type_id,) = struct.unpack_from(">H", body, pos)
    pos += 2
    if type_id == 0x0000:  # custom: [string]
        (ln,) = struct.unpack_from(">H", body, pos)
        return int(pos + 2 + ln)
    if type_id in (0x0020, 0x0022):  # list, set
        return _cql_skip_option(body, pos)
    if type_id == 0x0021:  # map
        return _cql_skip_option(body, _cql_skip_option(body, pos))
    if type_id in (0x0030, 0x0031):
        raise ValueError("UDT/tuple columns are not supported by this minimal CQL probe")
    return pos


def _cql_first_text(body: bytes) -> str | None:
    """Decode the first column of the first row of a RESULT/Rows body as UTF-8."""
    (kind,) = struct.unpack_from(">i", body, 0)
    if kind != 0x0002:
        return None
    flags, ncols = struct.unpack_from(">ii", body, 4)
    pos = 12
    if flags & 0x0002:  # has_more_pages: paging state [bytes]
        (ln,) = struct.unpack_from(">i", body, pos)
        pos += 4 + max(ln, 0)
    if not flags & 0x0004:  # metadata present
        global_spec = bool(flags & 0x0001)
        if global_spec:
            for _ in range(2):
                (ln,) = struct.unpack_from(">H", body, pos)
                pos += 2 + ln
        for _ in range(ncols):
            for _ in range(0 if global_spec else 2):
                (ln,) = struct.unpack_from(">H", body, pos)
                pos += 2 + ln
            (ln,) = struct.unpack_from(">H", body, pos)
            pos += 2 + ln
            pos = _cql_skip_option(body, pos)
    (nrows,) = struct.unpack_from(">i", body, pos)
    pos += 4
    if nrows < 1 or ncols < 1:
        return None
    (ln,) = struct.unpack_from(">i", body, pos)
    if ln < 0:
        return None
    return body[pos + 4 : pos + 4 + ln].decode("utf-8", errors="replace")


def cql_release_version(host: str, port: int, timeout: float = 5.0) -> str:
    """Do a real CQL v4 handshake and return ``system.local.release_version``.

    Sends OPTIONS (expects SUPPORTED), STARTUP (expects READY) and a QUERY at
    consistency ONE. Raises ``OSError``/``ConnectionError``/``ValueError`` if the
    node is not (yet) serving CQL.
    """
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        op, _ = _cql_request(sock, 0x05, b"", stream=1)  # OPTIONS
        if op != 0x06:
            raise ConnectionError(f"unexpected CQL response opcode {op} to OPTIONS")
        startup = struct.pack(">H", 1) + _cql_string("CQL_VERSION") + _cql_string("3.0.0")
        op, _ = _cql_request(sock, 0x01, startup, stream=2)  # STARTUP
        if op != 0x02:  # READY (0x03 would be AUTHENTICATE)
            raise ConnectionError(f"unexpected CQL response opcode {op} to STARTUP")
        query = b"SELECT release_version FROM system.local"
        body = struct.pack(">i", len(query)) + query + struct.pack(">HB", 0x0001, 0x00)
        op, result = _cql_request(sock, 0x07, body, stream=3)  # QUERY
        if op != 0x08:
            raise ConnectionError(f"unexpected CQL response opcode {op} to QUERY")
        version = _cql_first_text(result)
        if not version:
            raise ConnectionError("system.local returned no release_version")
        return version


def _kafka_request(
    sock: socket.socket, api_key: int, api_version: int, correlation_id: int, body: bytes
) -> bytes:
    """Send a non-flexible (header v1) Kafka request and return the response body."""
    client_id = b"fanline-infra"
    header = struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id)) + client_id
    frame = header + body
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    payload = _recv_exact(sock, size)
    (corr,) = struct.unpack_from(">i", payload, 0)
    if corr != correlation_id:
        raise ConnectionError(f"Kafka correlation id mismatch ({corr} != {correlation_id})")
    return payload[4:]


def kafka_live_brokers(host: str, port: int, timeout: float = 5.0) -> int:
    """Talk the real Kafka protocol and return the number of live (unfenced) brokers.

    Sends ApiVersions v0; then, if the broker supports a non-flexible Metadata
    version (1..8), a Metadata request for no topics and returns the broker count.
    If only flexible Metadata versions exist, a successful ApiVersions counts as 1.
    """
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        resp = _kafka_request(sock, 18, 0, 1, b"")  # ApiVersions v0
        error_code, count = struct.unpack_from(">hi", resp, 0)
        if error_code != 0:
            raise ConnectionError(f"ApiVersions error code {error_code}")
        ranges: dict[int, tuple[int, int]] = {}
        for i in range(count):
            key, lo, hi = struct.unpack_from(">hhh", resp, 6 + 6 * i)
            ranges[key] = (lo, hi)
        if 3 not in ranges:
            raise ConnectionError("broker does not advertise the Metadata API")
        lo, hi = ranges[3]
        version = min(hi, 8)
        if version < max(lo, 1):
            return 1
        body = struct.pack(">i", 0)  # topics: empty array (v1+: null would mean "all")
        if version >= 4:
            body += b"\x00"  # allow_auto_topic_creation = false
        if version >= 8:
            body += b"\x00\x00"  # include cluster/topic authorized operations = false
        meta = _kafka_request(sock, 3, version, 2, body)
        pos = 4 if version >= 3 else 0  # throttle_time_ms
        (brokers,) = struct.unpack_from(">i", meta, pos)
        return int(brokers)


# --------------------------------------------------------------------------- processes


def _proc_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", errors="replace") for part in raw.split(b"\0") if part]


def _pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # state is the first field after the parenthesised command name
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _find_pids(markers: Sequence[str]) -> list[int]:
    """PIDs whose command line contains every marker argument exactly."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        args = _proc_cmdline(int(entry.name))
        if args and all(m in args for m in markers) and _pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return sorted(found)


def _listen_inodes(port: int) -> set[str]:
    """Socket inodes of TCP listeners on ``port`` (any address), from /proc/net/tcp{,6}."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # fields: sl local_address rem_address st ... inode (index 9); st 0A == LISTEN
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def _pid_listens_on(pid: int, port: int) -> bool:
    """True if process ``pid`` itself owns the listening socket on ``port``.

    Guards readiness checks against answering *someone else's* server on the
    same port (e.g. a second state dir or a stray broker).
    """
    inodes = _listen_inodes(port)
    if not inodes:
        return False
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False


def _signal_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the process group led by ``pid`` (fall back to the pid alone)."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    try:
        if pgid == pid:
            os.killpg(pgid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


# --------------------------------------------------------------------------- engines


class _Engine:
    """One JVM engine (Cassandra or Kafka) living under ``<state>/<name>/``."""

    name: str = ""
    main_class: str = ""

    def __init__(self, config: InfraConfig) -> None:
        self.config = config
        self.home = config.state_dir / self.name
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
        return self.home / f"lib-{self.version}"

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
        build = self.config.state_dir / "build" / self.name
        staging = self.home / f".lib-{self.version}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        build.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.pom, build / "pom.xml")
        cmd = [mvn, "-q", "-B", "-f", str(build / "pom.xml"), "dependency:copy-dependencies",
               f"-DoutputDirectory={staging}"]
        cmd += [f"-D{k}={v}" for k, v in self.maven_properties().items()]
        log(f"fetching {self.name} {self.version} with Maven ...")
        started = time.monotonic()
        try:
            result = subprocess.run(cmd, cwd=build, capture_output=True, text=True,
                                    timeout=self.config.fetch_timeout)
        except subprocess.TimeoutExpired as exc:
            raise InfraError(f"mvn timed out after {exc.timeout:.0f}s fetching {self.name}") from exc
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip().splitlines()[-LOG_TAIL_LINES:]
            raise InfraError(f"mvn failed fetching {self.name} {self.version}:\n  " + "\n  ".join(output))
        jars = sorted(staging.glob("*.jar"))
        if not jars:
            raise InfraError(f"mvn produced no jars for {self.name} in {staging}")
        (staging / _FETCH_MARKER).write_text(
            json.dumps({"version": self.version, "jars": len(jars), "fetched_at": time.time()}) + "\n")
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
            if port and not _port_free(HOST, port):
                raise EngineStartError(
                    f"{self.name}: {what} port {HOST}:{port} is already in use by another process; "
                    f"stop it or choose another port (see FANLINE_* env vars)")

    def launch(self) -> None:
        """Start the JVM in the background in its own session/process group."""
        self.check_ports()
        self.prepare()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        cmd = self.command()
        env = dict(os.environ)
        env.setdefault("MALLOC_ARENA_MAX", "4")
        (self.log_dir / "launch-command.txt").write_text(" \\\n  ".join(cmd) + "\n")
        self._log_offsets = {path: (path.stat().st_size if path.is_file() else 0)
                             for path in (self.main_log, self.stdout_log)}
        with self.stdout_log.open("ab") as out:
            out.write(f"=== fanline infra: {self.name} started at {time.strftime('%Y-%m-%d %H:%M:%S')}"
                      f" (command line in launch-command.txt)\n".encode())
            out.flush()
            self._proc = subprocess.Popen(cmd, cwd=self.home, stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                          close_fds=True)
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
        if pids and not _wait_for(lambda: self._reap() or not any(_pid_alive(p) for p in pids),
                                  timeout, 0.2):
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


class _Cassandra(_Engine):
    name = "cassandra"
    main_class = CASSANDRA_MAIN
    pom = HERE / "cassandra" / "pom.xml"

    def __init__(self, config: InfraConfig) -> None:
        super().__init__(config)
        self.version = config.cassandra_version
        self.main_log = self.log_dir / "system.log"

    def maven_properties(self) -> dict[str, str]:
        return {"cassandra.version": self.version}

    def ports(self) -> dict[str, int]:
        return {"CQL": self.config.cassandra_port, "storage": self.config.cassandra_storage_port,
                "JMX": self.config.cassandra_jmx_port}

    @property
    def address(self) -> str:
        return f"{HOST}:{self.config.cassandra_port}"

    @property
    def client_port(self) -> int:
        return self.config.cassandra_port

    def prepare(self) -> None:
        for sub in ("data", "commitlog", "saved_caches", "hints", "cdc_raw"):
            (self.data_dir / sub).mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "triggers").mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        yaml = _render(HERE / "cassandra" / "cassandra.yaml", {
            "data_dir": self.data_dir, "log_dir": self.log_dir, "host": HOST,
            "storage_port": self.config.cassandra_storage_port,
            "native_port": self.config.cassandra_port,
        })
        (self.conf_dir / "cassandra.yaml").write_text(yaml, encoding="utf-8")
        shutil.copyfile(HERE / "cassandra" / "logback.xml", self.conf_dir / "logback.xml")

    def jamm_jar(self) -> Path | None:
        jars = sorted(self.lib_dir.glob("jamm-*.jar"))
        return jars[-1] if jars else None

    def command(self) -> list[str]:
        cfg = self.config
        cmd = [cfg.java, f"-Xms{cfg.cassandra_heap}", f"-Xmx{cfg.cassandra_heap}"]
        cmd += _read_jvm_options(HERE / "cassandra" / "jvm.options")
        jamm = self.jamm_jar()
        if jamm is not None:
            # cassandra-env.sh always loads jamm as an agent (object size measurement).
            cmd.append(f"-javaagent:{jamm}")
        cmd += self.markers
        cmd += [
            "-XX:HeapDumpPath=" + str(self.log_dir),
            f"-Dcassandra.config=file://{self.conf_dir / 'cassandra.yaml'}",
            f"-Dlogback.configurationFile=file://{self.conf_dir / 'logback.xml'}",
            f"-Dcassandra.logdir={self.log_dir}",
            f"-Dcassandra.storagedir={self.data_dir}",
            f"-Dcassandra.triggers_dir={self.conf_dir / 'triggers'}",
            "-Dcassandra-foreground=yes",
            # fast single-node start
            "-Dcassandra.skip_wait_for_gossip_to_settle=0",
            "-Dcassandra.ring_delay_ms=1000",
            "-Dcassandra.superuser_setup_delay_ms=0",
        ]
        if cfg.cassandra_jmx_port:
            cmd += [f"-Dcassandra.jmx.local.port={cfg.cassandra_jmx_port}",
                    "-Dcom.sun.management.jmxremote.authenticate=false",
                    f"-Djava.rmi.server.hostname={HOST}"]
        cmd += ["-cp", self.classpath, self.main_class]
        return cmd

    def probe(self) -> bool:
        try:
            cql_release_version(HOST, self.config.cassandra_port, timeout=5.0)
            return True
        except (OSError, ConnectionError, ValueError, struct.error):
            return False

    def running_version(self) -> str | None:
        """Version reported by the live node (CQL), else the startup log line."""
        pid = self.pid()
        if pid is None:
            return None
        if _pid_listens_on(pid, self.client_port):
            with contextlib.suppress(OSError, ConnectionError, ValueError, struct.error):
                return cql_release_version(HOST, self.client_port, timeout=5.0)
        return _last_match(self.main_log, r"Cassandra version: (\S+)")


class _Kafka(_Engine):
    name = "kafka"
    main_class = KAFKA_MAIN
    pom = HERE / "kafka" / "pom.xml"

    def __init__(self, config: InfraConfig) -> None:
        super().__init__(config)
        self.version = config.kafka_version
        self.main_log = self.log_dir / "server.log"
        self.cluster_id_file = self.home / "cluster.id"

    def maven_properties(self) -> dict[str, str]:
        return {"kafka.version": self.version, "log4j.version": self.config.log4j_version}

    def ports(self) -> dict[str, int]:
        return {"broker": self.config.kafka_port, "controller": self.config.kafka_controller_port}

    @property
    def address(self) -> str:
        return f"{HOST}:{self.config.kafka_port}"

    @property
    def client_port(self) -> int:
        return self.config.kafka_port

    def _jvm_base(self, heap: str) -> list[str]:
        return [self.config.java, f"-Xms{heap}", f"-Xmx{heap}",
                *_read_jvm_options(HERE / "kafka" / "jvm.options"),
                f"-Dlog4j2.configurationFile={self.conf_dir / 'log4j2.xml'}",
                f"-Dkafka.logs.dir={self.log_dir}"]

    def cluster_id(self) -> str:
        """Persistent KRaft cluster id (Kafka's Uuid format: url-safe base64, no padding)."""
        if self.cluster_id_file.is_file():
            return self.cluster_id_file.read_text().strip()
        while True:
            cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            if not cid.startswith("-"):
                break
        self.cluster_id_file.write_text(cid + "\n")
        return cid

    def prepare(self) -> None:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        props = _render(HERE / "kafka" / "server.properties", {
            "host": HOST, "broker_port": self.config.kafka_port,
            "controller_port": self.config.kafka_controller_port, "data_dir": self.data_dir,
        })
        (self.conf_dir / "server.properties").write_text(props, encoding="utf-8")
        shutil.copyfile(HERE / "kafka" / "log4j2.xml", self.conf_dir / "log4j2.xml")
        if not (self.data_dir / "meta.properties").is_file():
            self._format()

    def _format(self) -> None:
        """Format the KRaft storage once (standalone dynamic quorum with this node as voter)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [*self._jvm_base("256M"), "-cp", self.classpath, KAFKA_STORAGE_TOOL, "format",
               "-t", self.cluster_id(), "-c", str(self.conf_dir / "server.properties"),
               "--standalone", "--ignore-formatted"]
        result = subprocess.run(cmd, cwd=self.home, capture_output=True, text=True, timeout=180)
        (self.log_dir / "format.log").write_text(result.stdout + result.stderr)
        if result.returncode != 0:
            raise EngineStartError("kafka storage format failed:\n" + (result.stdout + result.stderr)[-4000:])

    def command(self) -> list[str]:
        return self._jvm_base(self.config.kafka_heap) + self.markers + [
            "-cp", self.classpath, self.main_class, str(self.conf_dir / "server.properties")]

    def probe(self) -> bool:
        try:
            return kafka_live_brokers(HOST, self.config.kafka_port, timeout=5.0) >= 1
        except (OSError, ConnectionError, struct.error):
            return False

    def running_version(self) -> str | None:
        """Version from the broker's own ``Kafka version: X`` log line (AppInfoParser)."""
        if self.running():
            return _last_match(self.main_log, r"Kafka version: (\S+)") or self._jar_version()
        return None

    def _jar_version(self) -> str | None:
        jars = sorted(self.lib_dir.glob("kafka-clients-*.jar"))
        m = re.match(r"kafka-clients-(.+)\.jar$", jars[-1].name) if jars else None
        return m.group(1) if m else None

    def wipe_data(self) -> None:
        super().wipe_data()
        self.cluster_id_file.unlink(missing_ok=True)


# --------------------------------------------------------------------------- public API


def _java_major(java: str) -> int:
    """Major version of a java executable (``java -version`` output)."""
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        raise InfraUnavailable(f"cannot parse `{java} -version` output: {out.stderr.strip()!r}")
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


class LocalInfra:
    """Manage the local Cassandra + Kafka pair. All public methods are idempotent."""

    def __init__(self, config: InfraConfig | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        self.config = config or InfraConfig.from_env()
        self.cassandra = _Cassandra(self.config)
        self.kafka = _Kafka(self.config)
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
        """Kafka ``bootstrap.servers`` value, e.g. ``127.0.0.1:9092``."""
        return self.kafka.address

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
            ignore.write_text("# generated by deploy/local/infra.py: runtime state, never commit\n*\n")

    # -- prerequisites / fetch -------------------------------------------------------
    def _engines(self, only: str | None = None) -> list[_Engine]:
        engines: list[_Engine] = [self.cassandra, self.kafka]
        return [e for e in engines if only in (None, e.name)]

    def check_prerequisites(self, need_mvn: bool | None = None) -> None:
        """Raise :class:`InfraUnavailable` unless java 17+ (and mvn, if a fetch is needed) exist.

        ``need_mvn=None`` means "only if some engine's jars are not cached yet".
        """
        if not sys.platform.startswith("linux") or not Path("/proc/self/cmdline").exists():
            raise InfraUnavailable("deploy/local/infra.py needs Linux (/proc, process groups)")
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
                f"{self.config.state_dir}; install Maven or set FANLINE_MVN")

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
                timeout = (self.config.cassandra_start_timeout if engine is self.cassandra
                           else self.config.kafka_start_timeout)
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
                    return engine.failure_report(
                        f"{engine.name} did not answer on {engine.address} within {timeout:.0f}s")
            return None

        longest = max((t for _, t in waiting), default=0.0) + 5.0
        if not _wait_for(poll, longest, interval=0.5, abort=abort):
            raise EngineStartError(abort() or "timed out waiting for engines")

    def start(self, fresh: bool = False) -> None:
        """Fetch if needed and start both engines (reusing any that already answer)."""
        self._start([self.cassandra, self.kafka], fresh=fresh)

    def start_cassandra(self, fresh: bool = False) -> None:
        """Start (or reuse) Cassandra only."""
        self._start([self.cassandra], fresh=fresh)

    def start_kafka(self, fresh: bool = False) -> None:
        """Start (or reuse) Kafka only. Existing topics/messages are kept unless ``fresh``."""
        self._start([self.kafka], fresh=fresh)

    def stop(self) -> None:
        """Stop both engines (signalled together, then awaited); leaves no process behind."""
        with self._locked():
            pending = [(engine, engine.request_stop()) for engine in (self.kafka, self.cassandra)]
            for engine, pids in pending:
                engine.wait_stopped(pids, self.config.stop_timeout)
                if pids:
                    self._log(f"{engine.name} stopped")

    def stop_cassandra(self) -> None:
        with self._locked():
            self.cassandra.stop(self.config.stop_timeout)

    def stop_kafka(self) -> None:
        """Stop Kafka only (cleanly, so its data is intact for the next :meth:`start_kafka`)."""
        with self._locked():
            self.kafka.stop(self.config.stop_timeout)

    def is_running(self) -> bool:
        """True if both engines are running *and* answering on their protocols."""
        return all(e.ready() for e in self._engines())

    def status(self) -> dict[str, dict[str, object]]:
        """Per-engine ``{"pid", "running", "answering", "address", "version"}``."""
        out: dict[str, dict[str, object]] = {}
        for engine in self._engines():
            pid = engine.pid()
            answering = pid is not None and engine.ready()
            out[engine.name] = {"pid": pid, "running": pid is not None, "answering": answering,
                                "address": engine.address, "configured_version": engine.version}
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

    # -- tools -----------------------------------------------------------------------
    def tools_classpath(self) -> str:
        """Classpath (``<lib>/*``) of cassandra-all and its dependencies, fetched if needed.

        It contains the server-side tools (nodetool, sstable tools) but not
        cassandra-stress, which Apache does not publish to Maven Central.
        """
        self.fetch(only="cassandra")
        return self.cassandra.classpath

    def nodetool_command(self, *args: str) -> list[str]:
        """Command line for ``nodetool`` against the local node (needs the JMX port)."""
        if not self.config.cassandra_jmx_port:
            raise InfraUnavailable("nodetool needs JMX; FANLINE_CASSANDRA_JMX_PORT is 0")
        return [self.config.java, "-Xmx128M", *self._tool_jvm_flags(),
                "-cp", self.tools_classpath(), NODETOOL_MAIN,
                "-h", HOST, "-p", str(self.config.cassandra_jmx_port), *args]

    def stress_classpath(self) -> str:
        """Classpath for cassandra-stress: a user-supplied ``stress.jar`` + cassandra-all deps.

        ``org.apache.cassandra:cassandra-stress`` does not exist on Maven Central
        (checked for 5.0.x); the tool ships only in the binary tarball as
        ``tools/lib/stress.jar``. Point ``FANLINE_CASSANDRA_STRESS_JAR`` at such a
        jar (or drop it at ``<state>/cassandra/tools/stress.jar``).
        """
        candidates = [os.environ.get("FANLINE_CASSANDRA_STRESS_JAR", ""),
                      str(self.cassandra.home / "tools" / "stress.jar")]
        for cand in candidates:
            if cand and Path(cand).is_file():
                return f"{Path(cand).resolve()}{os.pathsep}{self.tools_classpath()}"
        raise InfraUnavailable(
            "cassandra-stress is not published to Maven Central; set FANLINE_CASSANDRA_STRESS_JAR "
            "to tools/lib/stress.jar from an apache-cassandra binary tarball of the same version")

    def stress_command(self, *args: str) -> list[str]:
        """Command line for ``cassandra-stress <args>`` against the local node."""
        return [self.config.java, "-Xmx512M", *self._tool_jvm_flags(),
                "-Dcassandra.storagedir=" + str(self.cassandra.data_dir),
                "-cp", self.stress_classpath(), STRESS_MAIN, *args,
                "-node", HOST, "-port", f"native={self.config.cassandra_port}"]

    @staticmethod
    def _tool_jvm_flags() -> list[str]:
        """Java 17 module flags from jvm.options plus quiet logging for client tools."""
        flags = [f for f in _read_jvm_options(HERE / "cassandra" / "jvm.options")
                 if f.startswith(("--add-", "-Djdk.attach", "-Dio.netty", "-Djava.net"))]
        return [*flags, f"-Dlogback.configurationFile=file://{HERE / 'cassandra' / 'logback-tools.xml'}"]


# --------------------------------------------------------------------------- CLI


def _print_status(infra: LocalInfra) -> bool:
    versions = infra.versions()
    healthy = True
    for name, st in infra.status().items():
        if st["answering"]:
            state = "up"
        elif st["running"]:
            state, healthy = "starting/not answering", False
        else:
            state, healthy = "down", False
        pid = f" pid={st['pid']}" if st["pid"] else ""
        print(f"{name:<9} {versions[name]:<8} {st['address']:<16} {state}{pid}")
    return healthy


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="infra.py", description="Local single-node Cassandra + Kafka for Fanline (no Docker).")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch", help="download engine jars with Maven (skipped when cached)")
    p_up = sub.add_parser("up", help="fetch if needed, start both engines, wait until they answer")
    p_up.add_argument("--fresh", action="store_true", help="wipe Cassandra and Kafka data first")
    p_up.add_argument("--only", choices=["cassandra", "kafka"], help="start just one engine")
    p_down = sub.add_parser("down", help="stop the engines (SIGTERM, then SIGKILL after a timeout)")
    p_down.add_argument("--only", choices=["cassandra", "kafka"], help="stop just one engine")
    sub.add_parser("status", help="show state; exit 0 only if both engines answer")
    sub.add_parser("versions", help="print engine versions as JSON")
    p_logs = sub.add_parser("logs", help="print the tail of the engine logs")
    p_logs.add_argument("engine", nargs="?", choices=["cassandra", "kafka"])
    p_logs.add_argument("-n", "--lines", type=int, default=LOG_TAIL_LINES)
    sub.add_parser("env", help="print FANLINE_* connection variables (eval-able)")
    p_nt = sub.add_parser("nodetool", help="run Cassandra's nodetool against the local node")
    p_nt.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)

    infra = LocalInfra()
    try:
        if args.cmd == "fetch":
            infra.fetch()
            for engine in infra._engines():
                print(f"{engine.name:<9} {engine.version:<8} {engine.lib_dir}")
        elif args.cmd == "up":
            engines = infra._engines(args.only)
            infra._start(engines, fresh=args.fresh)
            versions = infra.versions()
            for engine in engines:
                secs = infra.startup_seconds.get(engine.name, 0.0)
                how = "reused" if secs == 0.0 else f"started in {secs:.1f}s"
                print(f"{engine.name:<9} {versions[engine.name]:<8} {engine.address:<16} ({how})")
        elif args.cmd == "down":
            if args.only == "cassandra":
                infra.stop_cassandra()
            elif args.only == "kafka":
                infra.stop_kafka()
            else:
                infra.stop()
            print("stopped")
        elif args.cmd == "status":
            return 0 if _print_status(infra) else 1
        elif args.cmd == "versions":
            print(json.dumps(infra.versions()))
        elif args.cmd == "logs":
            for name, paths in infra.log_paths().items():
                if args.engine not in (None, name):
                    continue
                for path in paths:
                    print(f"==> {path} <==")
                    print("\n".join(_tail(path, args.lines)))
        elif args.cmd == "env":
            print(f"FANLINE_CASSANDRA_CONTACT={infra.cassandra_contact}")
            print(f"FANLINE_KAFKA_BOOTSTRAP={infra.kafka_bootstrap}")
        elif args.cmd == "nodetool":
            return subprocess.call(infra.nodetool_command(*args.args))
    except InfraUnavailable as exc:
        print(f"infra unavailable: {exc}", file=sys.stderr)
        return 3
    except InfraError as exc:
        print(f"infra error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
