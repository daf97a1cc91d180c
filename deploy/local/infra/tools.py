"""Command lines for Cassandra's client tools against the engines
``LocalInfra`` manages: ``nodetool`` (over JMX, any node of a cluster) and
``cassandra-stress`` (from a user-supplied ``stress.jar``), with the
classpath of the fetched cassandra-all and the JVM flags they need. A mixin
of ``LocalInfra`` (split out of ``launcher``), so these stay its methods."""

from __future__ import annotations

import os
from pathlib import Path

from .cassandra import _Cassandra
from .config import HERE, HOST, NODETOOL_MAIN, STRESS_MAIN, InfraConfig
from .engine import _Engine
from .errors import InfraUnavailable
from .files import _read_jvm_options


class CassandraTools:
    """Mixin: needs ``config``, ``cassandra``, ``node`` and ``fetch`` of ``LocalInfra``."""

    config: InfraConfig
    cassandra: _Cassandra

    def node(self, kind: str, number: int) -> _Engine:
        raise NotImplementedError  # LocalInfra.node

    def fetch(self, only: str | None = None) -> None:
        raise NotImplementedError  # LocalInfra.fetch

    def tools_classpath(self) -> str:
        """Classpath (``<lib>/*``) of cassandra-all and its dependencies, fetched if needed.

        It contains the server-side tools (nodetool, sstable tools) but not
        cassandra-stress, which Apache does not publish to Maven Central.
        """
        self.fetch(only="cassandra")
        return self.cassandra.classpath

    def nodetool_command(self, *args: str, node: int = 1) -> list[str]:
        """Command line for ``nodetool`` against the local node (a cluster's node ``node``;
        needs the JMX port)."""
        if not self.config.cassandra_jmx_port:
            raise InfraUnavailable("nodetool needs JMX; FANLINE_CASSANDRA_JMX_PORT is 0")
        engine = self.node("cassandra", node)
        return [
            self.config.java,
            "-Xmx128M",
            *self._tool_jvm_flags(),
            "-cp",
            self.tools_classpath(),
            NODETOOL_MAIN,
            "-h",
            HOST,
            "-p",
            str(self.config.jmx_port(engine.node)),
            *args,
        ]

    def stress_classpath(self) -> str:
        """Classpath for cassandra-stress: a user-supplied ``stress.jar`` + cassandra-all deps.

        ``org.apache.cassandra:cassandra-stress`` does not exist on Maven Central
        (checked for 5.0.x); the tool ships only in the binary tarball as
        ``tools/lib/stress.jar``. Point ``FANLINE_CASSANDRA_STRESS_JAR`` at such a
        jar (or drop it at ``<state>/cassandra/tools/stress.jar``).
        """
        candidates = [os.environ.get("FANLINE_CASSANDRA_STRESS_JAR", ""), str(self.cassandra.home / "tools" / "stress.jar")]
        for cand in candidates:
            if cand and Path(cand).is_file():
                return f"{Path(cand).resolve()}{os.pathsep}{self.tools_classpath()}"
        raise InfraUnavailable(
            "cassandra-stress is not published to Maven Central; set FANLINE_CASSANDRA_STRESS_JAR "
            "to tools/lib/stress.jar from an apache-cassandra binary tarball of the same version"
        )

    def stress_command(self, *args: str) -> list[str]:
        """Command line for ``cassandra-stress <args>`` against the local node."""
        return [
            self.config.java,
            "-Xmx512M",
            *self._tool_jvm_flags(),
            "-Dcassandra.storagedir=" + str(self.cassandra.data_dir),
            "-cp",
            self.stress_classpath(),
            STRESS_MAIN,
            *args,
            "-node",
            HOST,
            "-port",
            f"native={self.config.cassandra_port}",
        ]

    @staticmethod
    def _tool_jvm_flags() -> list[str]:
        """Java 17 module flags from jvm.options plus quiet logging for client tools."""
        flags = [
            f
            for f in _read_jvm_options(HERE / "cassandra" / "jvm.options")
            if f.startswith(("--add-", "-Djdk.attach", "-Dio.netty", "-Djava.net"))
        ]
        return [*flags, f"-Dlogback.configurationFile=file://{HERE / 'cassandra' / 'logback-tools.xml'}"]
