"""``fanline backup DIR`` and ``fanline restore DIR``: the storage services'
data, on either backend (docs/operations/backup.md).

A backup is a directory with ``manifest.json`` (format, backend, when it was
taken, the Fanline version, each service's keyspace and rows per table) and
one entry per storage service, named after its keyspace:

* embedded (SQLite): ``<keyspace>.sqlite3``, a copy made with SQLite's
  online backup API, so it is one consistent instant of each file even while
  the service writes (the two files are two instants);
* cassandra: a directory ``<keyspace>/`` with the schema and every table's
  rows (``cassandra_backup``), read while the system runs.

Restore writes into the deployment the environment names (its keyspace
prefix may differ from the backup's): each service's keyspace or file must
not exist, unless ``--replace`` drops it first. Stop social-graph and
tweet-store while restoring (a running service keeps using the data it has
open, and would re-create an empty schema at start); the gateways and
workers may keep running.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fanline_shared.config import StorageSettings
from fanline_shared.sqlite import database_path

from . import __version__

FORMAT = 1
MANIFEST = "manifest.json"


class BackupError(RuntimeError):
    """A backup or restore that must not go ahead (reported with exit 1)."""


@dataclass(frozen=True)
class Report:
    service: str
    keyspace: str
    tables: dict[str, int]  # rows per table
    seconds: float

    def line(self, verb: str) -> str:
        rows = sum(self.tables.values())
        rate = f", {rows / self.seconds:,.0f} rows/s" if self.seconds > 0 and rows else ""
        return f"{self.service}: {verb} {self.keyspace}: {len(self.tables)} tables, {rows:,} rows in {self.seconds:.1f} s{rate}"


def backup(settings: StorageSettings, services: Sequence[str], target: Path) -> list[Report]:
    """Copy each service's data into ``target`` (absent or empty)."""
    if target.exists() and any(target.iterdir()):
        raise BackupError(f"{target} is not empty: back up into a new directory")
    target.mkdir(parents=True, exist_ok=True)
    taken_at = time.time()
    reports = (
        _cassandra_backup(settings, services, target)
        if settings.backend == "cassandra"
        else _sqlite_backup(settings, services, target)
    )
    manifest = {
        "format": FORMAT,
        "backend": settings.backend,
        "taken_at": datetime.fromtimestamp(taken_at, UTC).isoformat(),
        "taken_at_unix": taken_at,
        "finished_at": datetime.now(UTC).isoformat(),
        "fanline_version": __version__,
        "keyspaces": {r.service: {"keyspace": r.keyspace, "tables": r.tables} for r in reports},
    }
    (target / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return reports


def restore(settings: StorageSettings, services: Sequence[str], source: Path, *, replace: bool) -> list[Report]:
    """Write a backup's data into the deployment ``settings`` names."""
    manifest = read_manifest(source)
    if manifest["backend"] != settings.backend:
        raise BackupError(
            f"{source} is a {manifest['backend']} backup; FANLINE_BACKEND is {settings.backend} "
            "(a backup restores into the backend it was taken from)"
        )
    missing = [s for s in services if s not in manifest["keyspaces"]]
    if missing:
        raise BackupError(f"{source} has no data of {', '.join(missing)}")
    if settings.backend == "cassandra":
        return _cassandra_restore(settings, services, source, manifest, replace)
    return _sqlite_restore(settings, services, source, manifest, replace)


def read_manifest(source: Path) -> dict[str, Any]:
    try:
        manifest: dict[str, Any] = json.loads((source / MANIFEST).read_text())
    except FileNotFoundError:
        raise BackupError(f"{source} is not a Fanline backup (no {MANIFEST})") from None
    if manifest.get("format") != FORMAT:
        raise BackupError(f"{source}: backup format {manifest.get('format')}, this fanline reads {FORMAT}")
    return manifest


# --------------------------------------------------------------------------
# SQLite
# --------------------------------------------------------------------------


def _sqlite_tables(connection: sqlite3.Connection) -> dict[str, int]:
    names = [r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    return {name: int(connection.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]) for name in names}


def _copy_sqlite(source: Path, target: Path) -> dict[str, int]:
    """SQLite's online backup: a consistent copy even while ``source`` is written."""
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
        tables = _sqlite_tables(dst)
    src.close()
    dst.close()
    return tables


def _sqlite_backup(settings: StorageSettings, services: Sequence[str], target: Path) -> list[Report]:
    reports = []
    for service in services:
        path = database_path(settings, service)
        if not path.exists():
            raise BackupError(f"{service}: no database at {path} (FANLINE_DATA_DIR, FANLINE_KEYSPACE_PREFIX)")
        started = time.monotonic()
        tables = _copy_sqlite(path, target / path.name)
        reports.append(Report(service, settings.keyspace(service), tables, time.monotonic() - started))
    return reports


def _sqlite_restore(
    settings: StorageSettings, services: Sequence[str], source: Path, manifest: dict[str, Any], replace: bool
) -> list[Report]:
    reports = []
    for service in services:
        path = database_path(settings, service)
        companions = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
        if path.exists() and not replace:
            raise BackupError(f"{service}: {path} exists; restore into an empty data directory, or --replace")
        started = time.monotonic()
        for file in companions:
            file.unlink(missing_ok=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        backed_up = source / f"{manifest['keyspaces'][service]['keyspace']}.sqlite3"
        tables = _copy_sqlite(backed_up, path)
        reports.append(Report(service, settings.keyspace(service), tables, time.monotonic() - started))
    return reports


# --------------------------------------------------------------------------
# Cassandra
# --------------------------------------------------------------------------


def _cassandra_backup(settings: StorageSettings, services: Sequence[str], target: Path) -> list[Report]:
    from fanline_shared.cassandra import connect

    from .cassandra_backup import backup_keyspace

    session = connect(settings)
    try:
        reports = []
        for service in services:
            keyspace = settings.keyspace(service)
            started = time.monotonic()
            counts = backup_keyspace(session, keyspace, target / keyspace)
            reports.append(Report(service, keyspace, {c.table: c.rows for c in counts}, time.monotonic() - started))
        return reports
    finally:
        session.cluster.shutdown()


def _cassandra_restore(
    settings: StorageSettings, services: Sequence[str], source: Path, manifest: dict[str, Any], replace: bool
) -> list[Report]:
    from fanline_shared.cassandra import connect

    from .cassandra_backup import restore_keyspace

    session = connect(settings)
    try:
        reports = []
        for service in services:
            keyspace = settings.keyspace(service)
            if replace:
                session.execute(f'DROP KEYSPACE IF EXISTS "{keyspace}"', timeout=120)
            started = time.monotonic()
            backed_up = source / manifest["keyspaces"][service]["keyspace"]
            counts = restore_keyspace(session, settings, keyspace, backed_up, float(manifest["taken_at_unix"]))
            reports.append(Report(service, keyspace, {c.table: c.rows for c in counts}, time.monotonic() - started))
        return reports
    finally:
        session.cluster.shutdown()
