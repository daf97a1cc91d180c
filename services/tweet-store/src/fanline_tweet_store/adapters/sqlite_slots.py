"""The id slots' leases (``fanline_tweet_store.sids.IdSlots``) in tweet-store's
SQLite database: one row per slot held, with an expiry by this machine's
clock (shared by every process on the file); a slot is taken in one
transaction, so of processes starting at once each slot goes to one."""

from __future__ import annotations

import sqlite3
import time

from fanline_shared.sqlite import SqliteDatabase

from ..sids import random_slot_order


class SqliteIdSlots:
    """The leases of the id slots (``sids.IdSlots``), rows with an expiry."""

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    async def acquire_slot(self, holder: str, ttl_s: int) -> int | None:
        order = random_slot_order()

        def take(conn: sqlite3.Connection) -> int | None:
            now = time.time()
            held = {r[0]: (r[1], r[2]) for r in conn.execute("SELECT slot, holder, expires_at FROM id_slots")}
            for slot in order:
                current = held.get(slot)
                if current is None or current[1] <= now or current[0] == holder:
                    conn.execute(
                        "INSERT INTO id_slots (slot, holder, expires_at) VALUES (?, ?, ?) "
                        "ON CONFLICT (slot) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at",
                        (slot, holder, now + ttl_s),
                    )
                    return slot
            return None

        return await self.db.run(take, name="id_slot_acquire")

    async def renew_slot(self, slot: int, holder: str, ttl_s: int) -> bool:
        def renew(conn: sqlite3.Connection) -> bool:
            now = time.time()
            cursor = conn.execute(
                "UPDATE id_slots SET expires_at = ? WHERE slot = ? AND holder = ? AND expires_at > ?",
                (now + ttl_s, slot, holder, now),
            )
            return cursor.rowcount == 1

        return await self.db.run(renew, name="id_slot_renew")

    async def release_slot(self, slot: int, holder: str) -> None:
        await self.db.run(
            lambda conn: conn.execute("DELETE FROM id_slots WHERE slot = ? AND holder = ?", (slot, holder)),
            name="id_slot_release",
        )
