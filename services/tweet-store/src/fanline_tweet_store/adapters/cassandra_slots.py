"""The id slots' leases (``fanline_tweet_store.sids.IdSlots``) in tweet-store's
keyspace: ``id_slots``, one row per slot held, whose TTL is the lease. A slot
is taken with an LWT insert when absent (or expired: the TTL ran out) and
renewed by its holder with an LWT update, so concurrent takers agree on one
holder (serial consistency). The schema is in ``cassandra.py``'s migrations.
"""

from __future__ import annotations

from cassandra.cluster import Session

from fanline_shared.cassandra import Repository, execute_lwt, prepare

from ..sids import random_slot_order


class CassandraIdSlots(Repository):
    def _prepare(self, session: Session) -> None:
        ks = self._ks.name
        self._take = prepare(
            session,
            f"INSERT INTO {ks}.id_slots (slot, holder) VALUES (?, ?) IF NOT EXISTS USING TTL ?",
            write=True,
            idempotent=False,
        )
        self._renew = prepare(
            session,
            f"UPDATE {ks}.id_slots USING TTL ? SET holder = ? WHERE slot = ? IF holder = ?",
            write=True,
            idempotent=False,
        )
        self._release = prepare(session, f"DELETE FROM {ks}.id_slots WHERE slot = ? IF holder = ?", write=True, idempotent=False)

    async def acquire_slot(self, holder: str, ttl_s: int) -> int | None:
        for slot in random_slot_order():
            taken, row = await execute_lwt(self._session, self._take, (slot, holder, ttl_s), name="id_slot_acquire")
            if taken or (row is not None and getattr(row, "holder", None) == holder):
                if not taken and not await self.renew_slot(slot, holder, ttl_s):
                    continue
                return slot
        return None

    async def renew_slot(self, slot: int, holder: str, ttl_s: int) -> bool:
        renewed, _ = await execute_lwt(self._session, self._renew, (ttl_s, holder, slot, holder), name="id_slot_renew")
        return renewed

    async def release_slot(self, slot: int, holder: str) -> None:
        await execute_lwt(self._session, self._release, (slot, holder), name="id_slot_release")
