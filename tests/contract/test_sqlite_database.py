"""``fanline_shared.sqlite.SqliteDatabase``: transactions, errors, migrations, durability."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fanline_shared.errors import Unavailable
from fanline_shared.sqlite import SqliteDatabase, database_path, split_script

from .support import storage_settings

MIGRATIONS = [
    "CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v TEXT NOT NULL);",
    "CREATE TABLE IF NOT EXISTS log (line TEXT);\nINSERT INTO log (line) VALUES ('a;b');",
]


async def open_db(path: Path) -> SqliteDatabase:
    db = SqliteDatabase(path)
    await db.open()
    await db.migrate(MIGRATIONS)
    return db


def test_file_lives_in_the_data_dir_named_after_the_keyspace(tmp_path: Path) -> None:
    settings = storage_settings("sqlite", data_dir=tmp_path / "nested" / "data", prefix="fanline")
    assert database_path(settings, "social-graph") == tmp_path / "nested" / "data" / "fanline_social_graph.sqlite3"


def test_split_script_keeps_semicolons_inside_strings() -> None:
    assert split_script(MIGRATIONS[1]) == [
        "CREATE TABLE IF NOT EXISTS log (line TEXT);",
        "INSERT INTO log (line) VALUES ('a;b');",
    ]


async def test_migrations_apply_once(tmp_path: Path) -> None:
    path = tmp_path / "d" / "m.sqlite3"
    db = await open_db(path)
    await db.migrate(MIGRATIONS)
    rows = await db.run(lambda c: c.execute("SELECT line FROM log").fetchall(), name="t", write=False)
    assert rows == [("a;b",)]
    version = await db.run(lambda c: c.execute("PRAGMA user_version").fetchone()[0], name="t")
    assert version == 2
    mode = await db.run(lambda c: c.execute("PRAGMA journal_mode").fetchone()[0], name="t", write=False)
    assert mode == "wal"
    await db.close()
    await db.close()  # twice: fine


async def test_two_databases_migrating_one_file_at_once(tmp_path: Path) -> None:
    path = tmp_path / "race.sqlite3"
    a, b = SqliteDatabase(path), SqliteDatabase(path)
    await asyncio.gather(a.open(), b.open())
    await asyncio.gather(a.migrate(MIGRATIONS), b.migrate(MIGRATIONS))
    assert await a.run(lambda c: c.execute("SELECT count(*) FROM log").fetchone()[0], name="t") == 1
    await a.close()
    await b.close()


async def test_failed_operation_rolls_back(tmp_path: Path) -> None:
    db = await open_db(tmp_path / "r.sqlite3")

    def half(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO kv VALUES ('x', '1')")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await db.run(half, name="t")
    assert await db.run(lambda c: c.execute("SELECT count(*) FROM kv").fetchone()[0], name="t") == 0
    await db.close()


async def test_operational_errors_become_unavailable(tmp_path: Path) -> None:
    db = await open_db(tmp_path / "e.sqlite3")
    with pytest.raises(Unavailable):
        await db.run(lambda c: c.execute("SELECT * FROM missing_table"), name="t")
    await db.close()
    with pytest.raises(Unavailable):
        await db.run(lambda c: c.execute("SELECT 1"), name="t")
    with pytest.raises(Unavailable):
        await db.ping()


async def test_operations_of_one_process_never_interleave(tmp_path: Path) -> None:
    db = await open_db(tmp_path / "c.sqlite3")

    def increment(conn: sqlite3.Connection) -> None:
        row = conn.execute("SELECT v FROM kv WHERE k = 'n'").fetchone()
        conn.execute("INSERT OR REPLACE INTO kv VALUES ('n', ?)", (str(int(row[0]) + 1 if row else 1),))

    await asyncio.gather(*(db.run(increment, name="t") for _ in range(200)))
    assert await db.run(lambda c: c.execute("SELECT v FROM kv").fetchone()[0], name="t") == "200"
    await db.close()


def test_acknowledged_write_survives_a_killed_process(tmp_path: Path) -> None:
    path = tmp_path / "durable.sqlite3"
    script = textwrap.dedent(
        f"""
        import asyncio, os, signal
        from fanline_shared.sqlite import SqliteDatabase

        async def main():
            db = SqliteDatabase({str(path)!r})
            await db.open()
            await db.migrate({MIGRATIONS!r})
            await db.run(lambda c: c.execute("INSERT INTO kv VALUES ('acked', 'yes')"), name="t")
            os.kill(os.getpid(), signal.SIGKILL)  # no close, no checkpoint

        asyncio.run(main())
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60, env={**os.environ})
    assert result.returncode == -9, result.stderr.decode()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT v FROM kv WHERE k = 'acked'").fetchone() == ("yes",)
    finally:
        conn.close()
