"""Let Cassandra's compactions settle before a phase that measures capacity.

A full run writes tens of millions of rows before its open-loop phases (the
post phase's drain, the celebrity phase's million-follower fan-outs), and
the node compacts them for minutes afterwards on the same two cores. A
saturation curve measured meanwhile finds the capacity the compactions
leave over, not the system's. The first full run with every phase found
84.4 requests/s where partial runs without those phases before it found
189.8 (compaction is the likely cause, not a measured one: the wait this
module records tells from the next run on). So the open-loop phases start once ``CompactionExecutor`` has neither
active nor pending tasks (read from the node's ``system_views.thread_pools``
virtual table), and record how long that took.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fanline_shared import cassandra as cql

from .common import say

QUERY = "SELECT active_tasks, pending_tasks FROM system_views.thread_pools WHERE name = 'CompactionExecutor'"


async def compaction_tasks(session: Any) -> int:
    """Compactions running or queued on the node the session talks to."""
    rows = list(await cql.execute(session, QUERY, name="bench_compactions"))
    return sum(int(r.active_tasks or 0) + int(r.pending_tasks or 0) for r in rows)


async def settle_compactions(
    session: Any, label: str, timeout_s: float = 600.0, interval_s: float = 2.0, quiet_polls: int = 3
) -> dict[str, Any]:
    """Wait until no compaction runs or waits for ``quiet_polls`` polls in a
    row (a flush can start one right after the last ends), at most
    ``timeout_s``. Returns {"tasks_at_start", "waited_s", "settled"}."""
    started = time.monotonic()
    first = await compaction_tasks(session)
    tasks, quiet = first, 0
    while True:
        quiet = quiet + 1 if tasks == 0 else 0
        if quiet >= quiet_polls:
            settled = True
            break
        if time.monotonic() - started > timeout_s:
            settled = False
            break
        await asyncio.sleep(interval_s)
        tasks = await compaction_tasks(session)
    waited = time.monotonic() - started
    if first or not settled:
        say(
            f"{label}: waited {waited:.0f}s for Cassandra's compactions ({first} at first)"
            + ("" if settled else f"; {tasks} still running after {timeout_s:.0f}s")
        )
    return {"tasks_at_start": first, "waited_s": round(waited, 1), "settled": settled}
