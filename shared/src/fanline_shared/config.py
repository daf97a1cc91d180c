"""Settings resolved once from the environment into frozen objects.

Every service builds its settings in its composition root with
``XSettings.from_env(os.environ)``; nothing else reads ``os.environ``. Tests pass
a plain dict instead. Every variable and its default is listed in README.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import SecretStr

from .engine_security import CassandraSecurity, KafkaSecurity
from .policies import AdmissionPolicy

Backend = Literal["embedded", "cassandra"]


class ConfigError(ValueError):
    """A variable is present but unusable; the message names it."""


# FANLINE_ENV: "development" (the default: laptops, tests, `make run`) or
# "production" (set by the production overlay of deploy/k8s and expected of
# any real deployment). In production a service refuses to start with a
# development or placeholder secret instead of running with a known one.
ENVIRONMENTS = ("development", "production")
# Values that only ever appear in examples; never accepted in production.
_PLACEHOLDER_MARKS = ("replace-me", "change-me", "changeme", "example", "placeholder", "fanline-dev")
INTERNAL_TOKEN_MIN = 16


def is_production(env: Env) -> bool:
    return env.choice("FANLINE_ENV", "development", ENVIRONMENTS) == "production"


def looks_like_placeholder(value: str) -> bool:
    lowered = value.lower()
    return any(mark in lowered for mark in _PLACEHOLDER_MARKS)


def internal_token(env: Env) -> str | None:
    """``FANLINE_INTERNAL_TOKEN``: the credential every ``/internal`` request
    carries (see ``internal_auth``). Unset means "none": the storage services
    then refuse every internal request (fail closed), and production refuses
    to start. It travels in an HTTP header, so only visible ASCII. Also read
    from the file ``FANLINE_INTERNAL_TOKEN_FILE`` names."""
    secret = env.secret("FANLINE_INTERNAL_TOKEN")
    value = secret.get_secret_value() if secret is not None else ""
    if not value:
        if is_production(env):
            raise ConfigError("FANLINE_INTERNAL_TOKEN must be set in production (FANLINE_ENV=production)")
        return None
    if len(value) < INTERNAL_TOKEN_MIN or not all(0x21 <= ord(c) <= 0x7E for c in value):
        raise ConfigError(f"FANLINE_INTERNAL_TOKEN must be at least {INTERNAL_TOKEN_MIN} visible ASCII characters")
    if is_production(env) and looks_like_placeholder(value):
        raise ConfigError("FANLINE_INTERNAL_TOKEN is a placeholder; production needs a random value (e.g. openssl rand -hex 32)")
    return value


class Env:
    """Typed reads of one environment mapping, with the variable named on error."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._env = environ

    def string(self, name: str, default: str) -> str:
        value = self._env.get(name, "").strip()
        return value or default

    def integer(self, name: str, default: int, *, minimum: int | None = None) -> int:
        raw = self._env.get(name, "").strip()
        if not raw:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
        if minimum is not None and value < minimum:
            raise ConfigError(f"{name} must be >= {minimum}, got {value}")
        return value

    def number(self, name: str, default: float, *, positive: bool = False) -> float:
        """A finite, non-negative number (every one we read is a duration, a
        rate or a size; 0 means "off" where a setting allows it), or with
        ``positive`` one greater than 0."""
        raw = self._env.get(name, "").strip()
        if not raw:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"{name} must be a number, got {raw!r}") from None
        if not math.isfinite(value):
            raise ConfigError(f"{name} must be a finite number, got {raw!r}")
        if positive and value <= 0:
            raise ConfigError(f"{name} must be positive, got {value}")
        if value < 0:
            raise ConfigError(f"{name} must not be negative, got {value}")
        return value

    def secret(self, name: str) -> SecretStr | None:
        """A secret: the value of ``name``, or the content of the file that
        ``name_FILE`` names (a mounted Secret; one trailing newline dropped);
        None if neither is set. Never both. The value never appears in an
        error message, nor in the ``repr`` of what holds it (``SecretStr``)."""
        inline = self._env.get(name, "")
        path = self._env.get(f"{name}_FILE", "").strip()
        if inline and path:
            raise ConfigError(f"set {name} or {name}_FILE, not both")
        if path:
            try:
                inline = Path(path).read_text(encoding="utf-8").removesuffix("\n").removesuffix("\r")
            except OSError as exc:
                raise ConfigError(f"{name}_FILE: cannot read {path} ({exc.strerror})") from None
            if not inline:
                raise ConfigError(f"{name}_FILE: {path} is empty")
        return SecretStr(inline) if inline else None

    def boolean(self, name: str, default: bool) -> bool:
        raw = self._env.get(name, "").strip().lower()
        if not raw:
            return default
        if raw in {"1", "true", "yes", "on"}:
            return True
        if raw in {"0", "false", "no", "off"}:
            return False
        raise ConfigError(f"{name} must be true or false, got {raw!r}")

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.string(name, default)
        if value not in choices:
            raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
        return value


def admission_policy(env: Env, default: AdmissionPolicy) -> AdmissionPolicy:
    """A service's admission control (``admission.py``): ``default`` (its
    named policy) with the FANLINE_ADMISSION_* variables applied. The same
    names serve every service; each process reads its own environment."""
    tolerance = env.number("FANLINE_ADMISSION_LATENCY_TOLERANCE", default.latency_tolerance)
    if 0 < tolerance < 1:
        raise ConfigError(
            "FANLINE_ADMISSION_LATENCY_TOLERANCE must be 0 (a fixed limit) or at least 1 "
            f"(a multiple of the latency without a queue), got {tolerance:g}"
        )
    return dataclasses.replace(
        default,
        max_in_flight=env.integer("FANLINE_ADMISSION_MAX_IN_FLIGHT", default.max_in_flight, minimum=0),
        queue_deadline_s=env.number("FANLINE_ADMISSION_QUEUE_DEADLINE_S", default.queue_deadline_s),
        max_queue=env.integer("FANLINE_ADMISSION_MAX_QUEUE", default.max_queue, minimum=0),
        retry_after_s=env.integer("FANLINE_ADMISSION_RETRY_AFTER_S", default.retry_after_s, minimum=1),
        fast_refusal_s=env.number("FANLINE_ADMISSION_FAST_REFUSAL_S", default.fast_refusal_s),
        latency_tolerance=tolerance,
    )


@dataclass(frozen=True)
class LogSettings:
    """How a service logs (``logs.py``): ``FANLINE_LOG_LEVEL`` and
    ``FANLINE_LOG_FORMAT`` (``json``, one object a line, the default; or
    ``console``, readable lines, what ``make run`` uses)."""

    level: str = "INFO"
    format: str = "json"

    @classmethod
    def from_env(cls, env: Env) -> LogSettings:
        level = env.string("FANLINE_LOG_LEVEL", "INFO").upper()
        level = {"WARN": "WARNING"}.get(level, level)
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ConfigError(f"FANLINE_LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, got {level!r}")
        return cls(level=level, format=env.choice("FANLINE_LOG_FORMAT", "json", ("json", "console")))


@dataclass(frozen=True)
class StorageSettings:
    """Where a service keeps its tables: SQLite files (embedded) or Cassandra."""

    backend: Backend
    data_dir: Path
    cassandra_hosts: tuple[str, ...]
    cassandra_port: int
    keyspace_prefix: str
    replication_factor: int
    local_dc: str
    request_timeout_s: float
    # Native protocol 4 by default: cassandra-driver frames v5 with checksums
    # computed in pure Python (segment.py, a bit-by-bit CRC24 per segment
    # header), which measured ~16 % more client CPU per statement (62 vs 52 µs)
    # and ~15 % fewer rows/s than v4 against the same Cassandra 5 node. v4 is
    # served by every Cassandra since 2.2; v5 (4.0+) adds the checksummed
    # framing, which TCP's own checksums and Cassandra's per-sstable checksums
    # mostly cover. FANLINE_CASSANDRA_PROTOCOL=5 opts in (falls back to v4).
    protocol_version: int = 4
    # Client encryption and PasswordAuthenticator credentials (engine_security).
    security: CassandraSecurity = field(default_factory=CassandraSecurity)
    # What a service does with its Cassandra schema at start: "migrate" it
    # (development, tests, make run: one command does everything), or "wait"
    # until the migrate job has brought it to the version the code needs and
    # run no DDL itself (production: never two migrators, never a service
    # racing the job; docs/operations/upgrade.md). `<service> migrate` and
    # `fanline migrate` always migrate. SQLite always migrates (one process).
    schema_at_start: Literal["migrate", "wait"] = "migrate"
    schema_wait_s: float = 600.0
    # How long an outbox partition past its hot minutes that the relay's
    # sweep read empty goes unread (cassandra/outbox.py): the longest a late
    # write into it waits if its own gateway did not publish it either.
    # 0: every open partition on every sweep, as before issue 31.
    outbox_recheck_s: float = 30.0
    # Which thread serves the driver's sockets (cassandra/loop_reactor.py):
    # "loop", the event loop that opened the session (no thread hop per
    # statement: 8-15 % less CPU in the storage services, issue 31), or
    # "libev", the driver's own reactor thread.
    reactor: Literal["loop", "libev"] = "loop"

    @classmethod
    def from_env(cls, env: Env) -> StorageSettings:
        backend = env.choice("FANLINE_BACKEND", "embedded", ("embedded", "cassandra"))
        hosts = tuple(h.strip() for h in env.string("FANLINE_CASSANDRA_HOSTS", "127.0.0.1").split(",") if h.strip())
        return cls(
            backend=backend,  # type: ignore[arg-type]
            data_dir=Path(env.string("FANLINE_DATA_DIR", ".data")).resolve(),
            cassandra_hosts=hosts,
            cassandra_port=env.integer("FANLINE_CASSANDRA_PORT", 9042, minimum=1),
            keyspace_prefix=env.string("FANLINE_KEYSPACE_PREFIX", "fanline"),
            replication_factor=env.integer("FANLINE_CASSANDRA_RF", 1, minimum=1),
            local_dc=env.string("FANLINE_CASSANDRA_DC", "datacenter1"),
            request_timeout_s=env.number("FANLINE_CASSANDRA_TIMEOUT_S", 10.0, positive=True),
            protocol_version=int(env.choice("FANLINE_CASSANDRA_PROTOCOL", "4", ("4", "5"))),
            security=CassandraSecurity.from_env(env) if backend == "cassandra" else CassandraSecurity(),
            schema_at_start=env.choice("FANLINE_SCHEMA_AT_START", "migrate", ("migrate", "wait")),  # type: ignore[arg-type]
            schema_wait_s=env.number("FANLINE_SCHEMA_WAIT_S", 600.0, positive=True),
            outbox_recheck_s=env.number("FANLINE_OUTBOX_RECHECK_S", 30.0),
            reactor=env.choice("FANLINE_CASSANDRA_REACTOR", "loop", ("loop", "libev")),  # type: ignore[arg-type]
        )

    def keyspace(self, owner: str) -> str:
        """The keyspace (or SQLite file stem) owned by one service."""
        return f"{self.keyspace_prefix}_{owner}".replace("-", "_")


@dataclass(frozen=True)
class KafkaSettings:
    """The broker, the topics and how we produce to them."""

    bootstrap: str
    idempotence: bool
    events_topic: str
    dlq_topic: str
    chunks_topic: str
    partitions: int
    replication_factor: int
    request_timeout_s: float
    # When an outbox row may be forgotten: "broker" once the broker has the
    # event (real Kafka keeps it), "applied" once the fan-out worker applied
    # it (the embedded broker keeps messages in memory only; see outbox.py).
    outbox_ack: Literal["broker", "applied"] = "broker"
    # TLS and SASL of every Kafka client (engine_security).
    security: KafkaSecurity = field(default_factory=KafkaSecurity)

    @property
    def ack_when_applied(self) -> bool:
        return self.outbox_ack == "applied"

    @classmethod
    def from_env(cls, env: Env) -> KafkaSettings:
        outbox_ack = env.choice("FANLINE_OUTBOX_ACK", "broker", ("broker", "applied"))
        if outbox_ack == "applied" and env.string("FANLINE_BACKEND", "embedded") == "cassandra":
            # The Cassandra outbox deletes on the broker's ack only; the relay
            # would fail every sweep and publish nothing.
            raise ConfigError("FANLINE_OUTBOX_ACK=applied needs FANLINE_BACKEND=embedded (the SQLite outbox)")
        return cls(
            bootstrap=env.string("FANLINE_KAFKA_BOOTSTRAP", "127.0.0.1:19092"),
            idempotence=env.boolean("FANLINE_KAFKA_IDEMPOTENCE", True),
            events_topic=env.string("FANLINE_EVENTS_TOPIC", "fanline.events"),
            dlq_topic=env.string("FANLINE_DLQ_TOPIC", "fanline.events.dlq"),
            # The fan-out worker's own topic of large fan-outs' slices.
            chunks_topic=env.string("FANLINE_CHUNKS_TOPIC", env.string("FANLINE_EVENTS_TOPIC", "fanline.events") + ".chunks"),
            partitions=env.integer("FANLINE_TOPIC_PARTITIONS", 8, minimum=1),
            replication_factor=env.integer("FANLINE_TOPIC_RF", 1, minimum=1),
            request_timeout_s=env.number("FANLINE_KAFKA_TIMEOUT_S", 5.0, positive=True),
            outbox_ack=outbox_ack,  # type: ignore[arg-type]
            security=KafkaSecurity.from_env(env),
        )


# A service's metrics port, unless set: its HTTP port plus this (8000 -> 8050).
METRICS_PORT_OFFSET = 50


@dataclass(frozen=True)
class HttpSettings:
    """Where a service listens: ``port`` for its API, probes included, and
    ``metrics_port`` for ``/metrics`` alone (Prometheus), which the API port
    does not serve -- so a proxy or Ingress in front of the API exposes no
    metrics, and a NetworkPolicy can admit Prometheus to that port only."""

    host: str
    port: int
    metrics_port: int = 0

    @classmethod
    def from_env(cls, env: Env, prefix: str, default_port: int) -> HttpSettings:
        port = env.integer(f"FANLINE_{prefix}_PORT", default_port, minimum=0)
        return cls(
            host=env.string(f"FANLINE_{prefix}_HOST", "127.0.0.1"),
            port=port,
            metrics_port=env.integer(f"FANLINE_{prefix}_METRICS_PORT", port + METRICS_PORT_OFFSET if port else 0, minimum=0),
        )


@dataclass(frozen=True)
class PeerSettings:
    """How to reach the other services over HTTP."""

    social_graph_url: str
    tweet_store_url: str
    timeout_s: float
    # Sent on every request to a peer (FANLINE_INTERNAL_TOKEN); None sends none.
    internal_token: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, env: Env) -> PeerSettings:
        return cls(
            social_graph_url=env.string("FANLINE_SOCIAL_GRAPH_URL", "http://127.0.0.1:8001").rstrip("/"),
            tweet_store_url=env.string("FANLINE_TWEET_STORE_URL", "http://127.0.0.1:8002").rstrip("/"),
            timeout_s=env.number("FANLINE_PEER_TIMEOUT_S", 10.0, positive=True),
            internal_token=internal_token(env),
        )
