"""How long `fanline backup` and `fanline restore` take at a given size: the
recovery point and time objectives of docs/operations/backup.md.

    python tools/measure_backup.py --backend embedded --rows 1000000
    make infra-up && python tools/measure_backup.py --backend cassandra --rows 1000000

Creates both storage services' schemas under a keyspace prefix of its own
(`fanline migrate`), writes ``--rows`` home-timeline rows (800 per owner, the
default cap, with the 30-day TTL real rows have) straight into tweet-store's
storage, then times a backup, destroys the data, times a restore, checks
the row count and removes everything it made. On a shared machine run it
under the engines' lock. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FANLINE = Path(sys.executable).parent / "fanline"
PER_OWNER = 800  # FANLINE_HOME_MAX_ROWS
TTL_S = 30 * 86400  # FANLINE_HOME_RETENTION_S


def fanline(env: dict[str, str], *args: str) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run([str(FANLINE), *args], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"fanline {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return time.monotonic() - started, done.stdout


def infra_env() -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, "deploy/local/infra", "env"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    env = {}
    for line in out.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        if key.startswith("FANLINE_"):
            env[key] = value.strip("'\"")
    return env


def fill_cassandra(env: dict[str, str], keyspace: str, rows: int) -> None:
    from cassandra.cluster import Cluster
    from cassandra.concurrent import execute_concurrent_with_args
    from cassandra.util import uuid_from_time

    cluster = Cluster(env["FANLINE_CASSANDRA_HOSTS"].split(","), port=int(env.get("FANLINE_CASSANDRA_PORT", "9042")))
    try:
        session = cluster.connect()
        session.default_timeout = 60  # a single small-heap node under a bulk load
        insert = session.prepare(
            f"INSERT INTO {keyspace}.home_timeline (owner_lc, tweet_id, author_lc) VALUES (?, ?, ?) USING TTL ?"
        )
        now = time.time()
        params = ((f"o{i // PER_OWNER}", uuid_from_time(now - i * 0.001), f"a{i % 1000}", TTL_S) for i in range(rows))
        execute_concurrent_with_args(session, insert, params, concurrency=32, raise_on_first_error=True)
    finally:
        cluster.shutdown()


def drop_keyspaces(env: dict[str, str], keyspaces: list[str]) -> None:
    from cassandra.cluster import Cluster

    cluster = Cluster(env["FANLINE_CASSANDRA_HOSTS"].split(","), port=int(env.get("FANLINE_CASSANDRA_PORT", "9042")))
    try:
        session = cluster.connect()
        for keyspace in keyspaces:
            session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=300)
    finally:
        cluster.shutdown()


def fill_sqlite(path: Path, rows: int) -> None:
    expires = int((time.time() + TTL_S) * 1000)
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO home_timeline (owner_lc, sort_key, tweet_id, author_lc, expires_at) VALUES (?, ?, ?, ?, ?)",
            ((f"o{i // PER_OWNER}", f"{i:012d}", str(uuid.uuid1()), f"a{i % 1000}", expires) for i in range(rows)),
        )
    db.close()


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("embedded", "cassandra"), required=True)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    prefix = f"measure{uuid.uuid4().hex[:6]}"
    work = Path(tempfile.mkdtemp(prefix="fanline-measure-"))
    env = {
        **os.environ,
        "FANLINE_BACKEND": args.backend,
        "FANLINE_KEYSPACE_PREFIX": prefix,
        "FANLINE_DATA_DIR": str(work / "data"),
    }
    if args.backend == "cassandra":
        env.update(infra_env())
    keyspaces = [f"{prefix}_social_graph", f"{prefix}_tweet_store"]
    result: dict[str, Any] = {"backend": args.backend, "home_rows": args.rows}
    try:
        fanline(env, "migrate")
        started = time.monotonic()
        if args.backend == "cassandra":
            fill_cassandra(env, keyspaces[1], args.rows)
        else:
            fill_sqlite(work / "data" / f"{keyspaces[1]}.sqlite3", args.rows)
        result["fill_s"] = round(time.monotonic() - started, 1)
        backup = work / "backup"
        result["backup_s"], _ = fanline(env, "backup", str(backup))
        result["backup_bytes"] = size(backup)
        if args.backend == "cassandra":
            drop_keyspaces(env, keyspaces)
        else:
            shutil.rmtree(work / "data")
        result["restore_s"], out = fanline(env, "restore", str(backup))
        restored = json.loads((backup / "manifest.json").read_text())["keyspaces"]["tweet-store"]["tables"]["home_timeline"]
        result["restore_report"] = out.strip().splitlines()
        result["home_rows_backed_up"] = restored
        result["backup_s"] = round(result["backup_s"], 1)
        result["restore_s"] = round(result["restore_s"], 1)
    finally:
        if args.backend == "cassandra":
            drop_keyspaces(env, keyspaces)
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 0 if result.get("home_rows_backed_up") == args.rows else 1


if __name__ == "__main__":
    sys.exit(main())
