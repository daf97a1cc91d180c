"""cassandra-stress, the write ceiling of the node as Apache's own tool sees it.

Apache does not publish ``cassandra-stress`` (``tools/lib/stress.jar``) to
Maven Central for 5.0 — there is no ``cassandra-stress`` artifact, and the
binary tarball ``org.apache.cassandra:apache-cassandra:<v>:tar.gz:bin`` is
published only up to **4.0-alpha2**. That tarball is fetched with Maven (the
project's usual client, cached in ``~/.m2``) and its stress tool, with its own
``lib/``, runs on Java 17 against the 5.0 node over the native protocol. If
``FANLINE_CASSANDRA_STRESS_JAR`` points at a 5.0 ``stress.jar``, that is used
instead (``LocalInfra.stress_command``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

TARBALL_VERSION = "4.0-alpha2"
ARTIFACT = f"org.apache.cassandra:apache-cassandra:{TARBALL_VERSION}:tar.gz:bin"


class StressUnavailable(RuntimeError):
    pass


def _fetch_tarball(infra: Any, log: Callable[[str], None]) -> Path:
    """The unpacked 4.0-alpha2 tarball under the infra state dir (fetched once)."""
    home = Path(infra.state_dir) / "stress" / f"apache-cassandra-{TARBALL_VERSION}"
    if (home / "tools" / "lib" / "stress.jar").is_file():
        return home
    mvn = shutil.which(infra.config.mvn)
    if mvn is None:
        raise StressUnavailable("mvn not found: cannot fetch the cassandra tarball that ships cassandra-stress")
    download = Path(infra.state_dir) / "stress" / "download"
    download.mkdir(parents=True, exist_ok=True)
    log(f"fetching {ARTIFACT} with Maven (cassandra-stress is not on Maven Central for 5.0)")
    done = subprocess.run(
        [mvn, "-q", "-B", "dependency:copy", f"-Dartifact={ARTIFACT}", f"-DoutputDirectory={download}"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    tarballs = list(download.glob("apache-cassandra-*-bin.tar.gz"))
    if done.returncode != 0 or not tarballs:
        raise StressUnavailable(f"could not fetch {ARTIFACT}: {(done.stdout + done.stderr)[-500:]}")
    with tarfile.open(tarballs[0]) as tar:
        tar.extractall(home.parent, filter="data")
    if not (home / "tools" / "lib" / "stress.jar").is_file():
        raise StressUnavailable(f"{ARTIFACT} has no tools/lib/stress.jar")
    return home


def stress_command(infra: Any, args: list[str], log: Callable[[str], None]) -> tuple[list[str], str]:
    """(argv, description of the tool used)."""
    try:
        return infra.stress_command(*args), "cassandra-stress from FANLINE_CASSANDRA_STRESS_JAR"
    except Exception:  # noqa: BLE001 - InfraUnavailable: no 5.0 jar supplied; fall back to the tarball
        pass
    home = _fetch_tarball(infra, log)
    flags = [f for f in infra._tool_jvm_flags() if not f.startswith("-Dlogback")]
    host, port = infra.cassandra_contact.rsplit(":", 1)
    argv = [
        infra.config.java,
        "-Xmx512M",
        *flags,
        f"-Dlogback.configurationFile=file://{home / 'conf' / 'logback-tools.xml'}",
        f"-Dcassandra.storagedir={home / 'data'}",
        "-cp",
        f"{home / 'tools' / 'lib' / 'stress.jar'}:{home / 'lib'}/*:{home / 'conf'}",
        "org.apache.cassandra.stress.Stress",
        *args,
        "-node",
        host,
        "-port",
        f"native={port}",
    ]
    return argv, f"cassandra-stress {TARBALL_VERSION} (from the apache-cassandra {TARBALL_VERSION} tarball on Maven Central)"


_OP_RATE = re.compile(r"^Op rate\s*:\s*([\d,]+) op/s", re.MULTILINE)


def parse_op_rate(output: str) -> float | None:
    m = _OP_RATE.search(output)
    return float(m.group(1).replace(",", "")) if m else None


def run_write(
    infra: Any, keyspace: str, ops: int, threads: int, log: Callable[[str], None], timeout_s: float = 900
) -> dict[str, Any]:
    """``cassandra-stress write n=<ops>`` into its own keyspace; returns
    {"ops_per_s", "tool", "args", "output_tail"}. Raises StressUnavailable."""
    args = [
        "write",
        f"n={ops}",
        "cl=LOCAL_QUORUM",
        "-rate",
        f"threads={threads}",
        "-col",
        "n=FIXED(1)",
        "size=FIXED(32)",
        "-schema",
        f"keyspace={keyspace}",
        "replication(factor=1)",
    ]
    argv, tool = stress_command(infra, args, log)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise StressUnavailable(f"cassandra-stress timed out after {timeout_s:.0f}s") from exc
    rate = parse_op_rate(done.stdout)
    if rate is None:
        raise StressUnavailable(f"cassandra-stress failed (exit {done.returncode}): {(done.stdout + done.stderr)[-800:]}")
    return {"ops_per_s": rate, "tool": tool, "args": " ".join(args), "output_tail": done.stdout.strip().splitlines()[-22:]}


# --- the fair opponent (issue 18): batched inserts into a home-timeline table ----------------

_ROW_RATE = re.compile(r"^Row rate\s*:\s*([\d,]+) row/s", re.MULTILINE)


def parse_row_rate(output: str) -> float | None:
    m = _ROW_RATE.search(output)
    return float(m.group(1).replace(",", "")) if m else None


def home_timeline_profile(keyspace: str, batch_rows: int, owners: int = 1_000_000, ttl_s: int = 30 * 24 * 3600) -> str:
    """A cassandra-stress user profile writing what the fan-out writes: rows
    of tweet-store's ``home_timeline`` table (same columns, key and order; the
    TTL as the table default, since a profile cannot say ``USING TTL``), one
    row to each of ``batch_rows`` partitions per unlogged batch — the shape of
    ``replica_batches`` on one node, where every partition shares the replica.

    The ``queries`` section is never run (``ops(insert=1)``), but
    cassandra-stress 4.0 will not load a profile without one (``StressProfile.
    init``: "Cannot invoke java.util.Map.keySet() because this.queries is
    null"); every run before 2026-11-26 lost this figure to that."""
    if batch_rows < 1:
        raise ValueError("batch_rows must be >= 1")
    return f"""\
keyspace: {keyspace}
keyspace_definition: |
  CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}};
table: home_timeline
table_definition: |
  CREATE TABLE home_timeline (
    owner_lc text,
    tweet_id timeuuid,
    author_lc text,
    PRIMARY KEY (owner_lc, tweet_id)
  ) WITH CLUSTERING ORDER BY (tweet_id DESC) AND default_time_to_live = {ttl_s}
columnspec:
  - name: owner_lc
    size: fixed(12)
    population: uniform(1..{owners})
  - name: tweet_id
    cluster: fixed(1)
  - name: author_lc
    size: fixed(10)
insert:
  partitions: fixed({batch_rows})
  select: fixed(1)/1
  batchtype: UNLOGGED
queries:
  page:
    cql: SELECT tweet_id, author_lc FROM home_timeline WHERE owner_lc = ? LIMIT 20
    fields: samerow
"""


def user_args(profile: Path, ops: int, threads: int) -> list[str]:
    """cassandra-stress arguments for ``ops`` inserts (batches) of ``profile``."""
    return ["user", f"profile={profile}", "ops(insert=1)", f"n={ops}", "cl=LOCAL_QUORUM", "-rate", f"threads={threads}"]


def run_user(
    infra: Any,
    keyspace: str,
    batch_rows: int,
    ops: int,
    threads: int,
    workdir: Path,
    log: Callable[[str], None],
    timeout_s: float = 900,
) -> dict[str, Any]:
    """``cassandra-stress user`` with ``home_timeline_profile``: {"rows_per_s",
    "ops_per_s", "tool", "args", "profile", "output_tail"}. Raises
    StressUnavailable."""
    workdir.mkdir(parents=True, exist_ok=True)
    profile = workdir / "home_timeline_profile.yaml"
    text = home_timeline_profile(keyspace, batch_rows)
    profile.write_text(text)
    args = user_args(profile, ops, threads)
    argv, tool = stress_command(infra, args, log)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise StressUnavailable(f"cassandra-stress user timed out after {timeout_s:.0f}s") from exc
    rows, op_rate = parse_row_rate(done.stdout), parse_op_rate(done.stdout)
    if rows is None and op_rate is not None:
        rows = op_rate * batch_rows
    if rows is None:
        raise StressUnavailable(f"cassandra-stress user failed (exit {done.returncode}): {(done.stdout + done.stderr)[-800:]}")
    return {
        "rows_per_s": rows,
        "ops_per_s": op_rate,
        "tool": tool,
        "args": " ".join(args),
        "profile": text,
        "output_tail": done.stdout.strip().splitlines()[-22:],
    }
