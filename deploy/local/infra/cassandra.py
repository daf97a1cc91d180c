"""The Cassandra engine: its ports, its rendered ``cassandra.yaml`` and
logback configuration, its JVM command line, and readiness/version over CQL."""

from __future__ import annotations

import contextlib
import shutil
import struct
from pathlib import Path

from .config import (
    CASSANDRA_MAIN,
    HERE,
    HOST,
    InfraConfig,
)
from .engine import _Engine
from .files import _last_match, _read_jvm_options, _render
from .probes import AuthenticationFailed, Credentials, cql_execute, cql_release_version
from .process import _pid_listens_on
from .secure import CASSANDRA_DEFAULT_PASSWORD, CASSANDRA_SUPERUSER, CASSANDRA_USER, SecureMaterial


class _Cassandra(_Engine):
    kind = "cassandra"
    main_class = CASSANDRA_MAIN
    pom = HERE / "cassandra" / "pom.xml"

    def __init__(self, config: InfraConfig, node: int = 0) -> None:
        super().__init__(config, node)
        self.version = config.cassandra_version
        self.main_log = self.log_dir / "system.log"
        self.material = SecureMaterial(config.state_dir, config.java) if config.secure else None

    def timer_slack_us(self) -> int:
        return self.config.cassandra_timer_slack_us  # engine.timer_slack: its thread pools spin-wait

    def maven_properties(self) -> dict[str, str]:
        return {"cassandra.version": self.version}

    def ports(self) -> dict[str, int]:
        return {
            "CQL": self.config.cassandra_port,
            "storage": self.config.cassandra_storage_port,
            "JMX": self.config.jmx_port(self.node),
        }

    @property
    def address(self) -> str:
        return f"{self.host}:{self.config.cassandra_port}"

    @property
    def client_port(self) -> int:
        return self.config.cassandra_port

    def prepare(self) -> None:
        for sub in ("data", "commitlog", "saved_caches", "hints", "cdc_raw"):
            (self.data_dir / sub).mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "triggers").mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self.material is not None:
            self.material.ensure()
            self.conf_dir.chmod(0o700)  # the rendered cassandra.yaml holds the store password
        (self.conf_dir / "cassandra.yaml").write_text(self.config_text(), encoding="utf-8")
        shutil.copyfile(HERE / "cassandra" / "logback.xml", self.conf_dir / "logback.xml")

    def config_text(self) -> str:
        """This node's rendered ``cassandra.yaml``."""
        cfg = self.config
        storage = cfg.cassandra_storage_port
        if cfg.clustered:
            # Every node is a seed: all start together and none needs to
            # bootstrap (stream) from another, so a fresh cluster is up in the
            # time of one node's start.
            seeds = ",".join(f"{cfg.host(i)}:{storage}" for i in range(1, cfg.nodes + 1))
            token = -(2**63) + (self.node - 1) * (2**64 // cfg.nodes)
        else:
            seeds, token = f"{HOST}:{storage}", 0
        return _render(
            HERE / "cassandra" / "cassandra.yaml",
            {
                "data_dir": self.data_dir,
                "log_dir": self.log_dir,
                "host": self.host,
                "storage_port": storage,
                "native_port": cfg.cassandra_port,
                "seeds": seeds,
                "initial_token": token,
                "cluster_name": "Fanline Local Cluster" if cfg.clustered else "Fanline Local",
                # A cluster routes reads away from a slow (e.g. paused) replica and
                # hints the writes a down replica missed; a single node has neither need.
                "dynamic_snitch": str(cfg.clustered).lower(),
                "hinted_handoff": str(cfg.clustered).lower(),
                "authenticator": "PasswordAuthenticator" if self.material is not None else "AllowAllAuthenticator",
                "client_encryption": self._client_encryption(),
            },
        )

    def _client_encryption(self) -> str:
        if self.material is None:
            return "client_encryption_options:\n  enabled: false"
        m, password = self.material, self.material.password("store")
        return (
            "client_encryption_options:\n  enabled: true\n  optional: false\n"
            f"  keystore: {m.keystore}\n  keystore_password: {password}\n"
            f"  truststore: {m.truststore}\n  truststore_password: {password}\n"
            "  store_type: PKCS12\n  require_client_auth: false"
        )

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
        if cfg.clustered:
            # Cluster nodes restart often (node-loss tests). Each start otherwise
            # measures the memtable row overhead by building rows: 25-30 s of CPU
            # on a busy 2-core machine, for a figure that is always ~125 bytes here.
            cmd.append("-Dcassandra.memtable.row_overhead_size=125")
            # A node that misses a schema push (DDL coordinated elsewhere while
            # gossip or the machine is busy) pulls the schema from a peer, but
            # by default only 60 s after it notices the difference (once it has
            # been up 60 s) and retries a failed pull a minute later. A CI run
            # on 2026-12-07 saw one node keep its own schema version through
            # all of social-graph's ~2.5 min agreement wait, and the service
            # exited at start. A pull 1 s after a difference is seen, retried
            # every 5 s, is what Cassandra's own multi-node tests use (10 s/5 s).
            cmd += ["-Dcassandra.migration_delay_ms=1000", "-Dcassandra.schema_pull_interval_ms=5000"]
        if cfg.cassandra_jmx_port:
            cmd += [
                f"-Dcassandra.jmx.local.port={cfg.jmx_port(self.node)}",
                "-Dcom.sun.management.jmxremote.authenticate=false",
                f"-Djava.rmi.server.hostname={HOST}",
            ]
        cmd += ["-cp", self.classpath, self.main_class]
        return cmd

    def probe(self) -> bool:
        try:
            if self.material is None:
                cql_release_version(self.host, self.config.cassandra_port, timeout=5.0)
            else:
                self._secure_probe(self.material)
            return True
        except (OSError, ConnectionError, ValueError, struct.error):
            return False

    def _secure_probe(self, material: SecureMaterial) -> str:
        """Over TLS as the services' role; at the first start that role does
        not exist yet: create it as the default superuser, whose well-known
        password is then replaced by a generated one."""
        tls = material.client_context()
        try:
            return cql_release_version(self.host, self.config.cassandra_port, tls=tls, login=material.cassandra_login())
        except AuthenticationFailed:
            pass
        admin, own = material.password("cassandra-admin"), material.password("cassandra-fanline")
        statements = [
            f"CREATE ROLE IF NOT EXISTS {CASSANDRA_USER} WITH PASSWORD = '{own}' AND LOGIN = true",
            f"ALTER ROLE {CASSANDRA_SUPERUSER} WITH PASSWORD = '{admin}'",
        ]
        for password in (CASSANDRA_DEFAULT_PASSWORD, admin):
            try:
                cql_execute(
                    self.host, self.config.cassandra_port, statements, tls=tls, login=Credentials(CASSANDRA_SUPERUSER, password)
                )
                break
            except AuthenticationFailed:
                continue
        return cql_release_version(self.host, self.config.cassandra_port, tls=tls, login=material.cassandra_login())

    def running_version(self) -> str | None:
        """Version reported by the live node (CQL), else the startup log line."""
        pid = self.pid()
        if pid is None:
            return None
        if _pid_listens_on(pid, self.client_port):
            with contextlib.suppress(OSError, ConnectionError, ValueError, struct.error):
                if self.material is not None:
                    return self._secure_probe(self.material)
                return cql_release_version(self.host, self.client_port, timeout=5.0)
        return _last_match(self.main_log, r"Cassandra version: (\S+)")
