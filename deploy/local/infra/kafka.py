"""The Kafka engine in KRaft combined mode: its ports, rendered
``server.properties``, one-time storage format with a persistent cluster id,
its JVM command line, and readiness (a live broker) and version."""

from __future__ import annotations

import base64
import re
import shutil
import struct
import subprocess
import uuid

from .config import (
    HERE,
    KAFKA_MAIN,
    KAFKA_STORAGE_TOOL,
    InfraConfig,
)
from .engine import _Engine
from .errors import EngineStartError
from .files import _last_match, _read_jvm_options, _render
from .probes import kafka_live_brokers
from .secure import KAFKA_ADMIN, KAFKA_USER, SecureMaterial


class _Kafka(_Engine):
    kind = "kafka"
    main_class = KAFKA_MAIN
    pom = HERE / "kafka" / "pom.xml"

    def __init__(self, config: InfraConfig, node: int = 0) -> None:
        super().__init__(config, node)
        self.version = config.kafka_version
        self.main_log = self.log_dir / "server.log"
        # One KRaft cluster id for all of a cluster's brokers (formatted with it).
        self.cluster_id_file = self.kind_home / "cluster.id"
        self.material = SecureMaterial(config.state_dir, config.java) if config.secure else None

    def maven_properties(self) -> dict[str, str]:
        return {"kafka.version": self.version, "log4j.version": self.config.log4j_version}

    def ports(self) -> dict[str, int]:
        return {"broker": self.config.kafka_port, "controller": self.config.kafka_controller_port}

    @property
    def address(self) -> str:
        return f"{self.host}:{self.config.kafka_port}"

    @property
    def client_port(self) -> int:
        return self.config.kafka_port

    def _jvm_base(self, heap: str) -> list[str]:
        return [
            self.config.java,
            f"-Xms{heap}",
            f"-Xmx{heap}",
            *_read_jvm_options(HERE / "kafka" / "jvm.options"),
            f"-Dlog4j2.configurationFile={self.conf_dir / 'log4j2.xml'}",
            f"-Dkafka.logs.dir={self.log_dir}",
        ]

    def cluster_id(self) -> str:
        """Persistent KRaft cluster id (Kafka's Uuid format: url-safe base64, no padding)."""
        self.cluster_id_file.parent.mkdir(parents=True, exist_ok=True)
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
        if self.material is not None:
            self.material.ensure()
            self.conf_dir.chmod(0o700)  # the rendered properties hold passwords
        (self.conf_dir / "server.properties").write_text(self.config_text(), encoding="utf-8")
        shutil.copyfile(HERE / "kafka" / "log4j2.xml", self.conf_dir / "log4j2.xml")
        if not (self.data_dir / "meta.properties").is_file():
            self._format()

    def config_text(self) -> str:
        """This broker's rendered ``server.properties``."""
        cfg = self.config
        values: dict[str, object] = {
            "host": self.host,
            "broker_port": cfg.kafka_port,
            "controller_port": cfg.kafka_controller_port,
            "data_dir": self.data_dir,
        }
        template = "server.properties"
        if self.material is not None:
            template = "server-secure.properties"
            values.update(
                keystore=self.material.keystore,
                truststore=self.material.truststore,
                store_password=self.material.password("store"),
                admin_password=self.material.password("kafka-admin"),
            )
        if cfg.clustered:
            # Static quorum: every broker is also a controller voter (combined mode).
            template = "server-cluster.properties"
            values["node_id"] = self.node
            values["voters"] = ",".join(f"{i}@{cfg.host(i)}:{cfg.kafka_controller_port}" for i in range(1, cfg.nodes + 1))
            values["rf"] = min(3, cfg.nodes)
            values["min_isr"] = max(1, min(3, cfg.nodes) - 1)
        return _render(HERE / "kafka" / template, values)

    def _format(self) -> None:
        """Format the KRaft storage once (standalone dynamic quorum with this node as voter)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            *self._jvm_base("256M"),
            "-cp",
            self.classpath,
            KAFKA_STORAGE_TOOL,
            "format",
            "-t",
            self.cluster_id(),
            "-c",
            str(self.conf_dir / "server.properties"),
            "--ignore-formatted",
        ]
        if not self.config.clustered:
            cmd.append("--standalone")  # a cluster's static voters need no flag
        if self.material is not None:
            # SCRAM users live in the metadata log: added when it is created.
            for user, secret in ((KAFKA_ADMIN, "kafka-admin"), (KAFKA_USER, "kafka-fanline")):
                cmd += ["--add-scram", f"SCRAM-SHA-512=[name={user},password={self.material.password(secret)}]"]
        result = subprocess.run(cmd, cwd=self.home, capture_output=True, text=True, timeout=180)
        (self.log_dir / "format.log").write_text(result.stdout + result.stderr)
        if result.returncode != 0:
            raise EngineStartError("kafka storage format failed:\n" + (result.stdout + result.stderr)[-4000:])

    def command(self) -> list[str]:
        return (
            self._jvm_base(self.config.kafka_heap)
            + self.markers
            + ["-cp", self.classpath, self.main_class, str(self.conf_dir / "server.properties")]
        )

    def probe(self) -> bool:
        try:
            tls = self.material.client_context() if self.material is not None else None
            login = self.material.kafka_login() if self.material is not None else None
            return kafka_live_brokers(self.host, self.config.kafka_port, timeout=5.0, tls=tls, login=login) >= 1
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
        if self.node <= 1:  # the cluster id is shared: forget it once, with node 1
            self.cluster_id_file.unlink(missing_ok=True)
