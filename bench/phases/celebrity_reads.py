"""Home reads with 0 / 10 / 100 followed large accounts — the last part of
the celebrity phase (issue 13, item 5).

Readers following 0, 10 or 100 large accounts (and five ordinary authors,
whose tweets are stored rows) read ``GET /v1/timeline?limit=20`` in
alternating blocks at a fixed open-loop rate. To have 100 large accounts
without 100 x 10,000 follow edges, the worker runs with
``FANLINE_LARGE_ACCOUNT_FOLLOWERS=Plan.read_large_threshold`` for this
sub-phase and each large account gets that many bulk-loaded followers: what
a read costs per merged account does not depend on the threshold. The
worker is left running with those settings; the caller restarts it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .. import seed, stats
from ..common import say
from ..harness import Bench


async def read_large(bench: Bench) -> dict[str, Any]:
    p = bench.plan
    tag = bench.tag
    most = max(p.read_large_counts)
    large = [f"a{tag}L{k:03d}" for k in range(most)]
    fillers = [f"a{tag}r{j}" for j in range(5)]
    readers = {g: [f"r{tag}_{g:03d}_{i:02d}" for i in range(p.read_large_readers)] for g in p.read_large_counts}
    say(
        f"home reads: {most} large accounts (threshold {p.read_large_threshold} for this sub-phase), "
        f"{sum(len(r) for r in readers.values())} readers"
    )
    await bench.gather_limited([bench.sign_up(a) for a in [*large, *fillers]], 4)
    all_readers = [r for rs in readers.values() for r in rs]
    edges = [(r, f) for r in all_readers for f in fillers]
    edges += [(r, large[k]) for g, rs in readers.items() for r in rs for k in range(g)]
    edges += [(seed.celebrity_follower(tag, i), a) for a in large for i in range(p.read_large_threshold)]
    await asyncio.to_thread(seed.bulk_load_edges, bench.session, bench.social_ks, edges, all_readers, None)
    await bench.gather_limited([bench.login(u, seed.POOL_PASSWORD) for u in all_readers], 4)
    await bench.restart_workers({"FANLINE_HYBRID_FANOUT": "true", "FANLINE_LARGE_ACCOUNT_FOLLOWERS": str(p.read_large_threshold)})
    base = await asyncio.to_thread(bench.rows_written) or 0.0
    # Fillers first (stored rows for every reader), then the large accounts
    # (merged at read time): the newest page of a reader with large accounts
    # is mostly theirs.
    filler_posts = [(f, k) for k in range(6) for f in fillers]
    await bench.gather_limited([bench.post_ours(f, f"filler {k}") for f, k in filler_posts], 8)
    await bench.gather_limited([bench.post_ours(a, f"large {k}") for a in large for k in range(2)], 8)
    expected = len(filler_posts) * (len(all_readers) + 1) + 2 * len(large)
    await bench.wait_rows(base + expected, p.drain_timeout_s, "read-phase tweets")
    await asyncio.sleep(1.5)  # tweet-store's registry cache (0.5 s) has seen every registration
    lat: dict[int, list[float]] = {g: [] for g in readers}
    merged_pages: dict[int, int] = {g: 0 for g in readers}
    short = 0
    large_lc = {a.lower() for a in large}

    async def one(g: int, reader: str) -> None:
        nonlocal short
        t = time.perf_counter()
        r = await bench.http.get(
            f"{bench.api}/v1/timeline", params={"limit": 20}, headers={"authorization": f"Bearer {bench.tokens[reader]}"}
        )
        lat[g].append((time.perf_counter() - t) * 1000)
        items = r.json().get("items", []) if r.status_code in (200, 206) else []
        if len(items) < 20:
            short += 1
        if any(str(i.get("author", i.get("username", ""))).lower() in large_lc for i in items):
            merged_pages[g] += 1

    for reader in all_readers:  # warm-up
        await one(0, reader)
    lat[0].clear()
    merged_pages[0] = short = 0
    n = int(p.read_rate * p.read_block_s)
    order = list(readers.items())
    for b in range(p.read_blocks):
        # Each block starts with another group, so drifting load hits all alike.
        for g, rs in order[b % len(order) :] + order[: b % len(order)]:
            start = time.monotonic() + 0.2

            async def at(i: int, g: int = g, rs: list[str] = rs, start: float = start) -> None:
                await asyncio.sleep(max(0.0, start + i / p.read_rate - time.monotonic()))
                await one(g, rs[i % len(rs)])

            await asyncio.gather(*(at(i) for i in range(n)))
    out = {str(g): {**(stats.summary(v, 3) or {}), "pages_with_merged_tweets": merged_pages[g]} for g, v in lat.items()}
    for g in readers:
        if g and not merged_pages[g]:
            bench.notes.append(f"home reads: no page of a reader following {g} large accounts held their tweets")
    say(
        "  home read p50/p99 by followed large accounts: "
        + ", ".join(f"{g}: {out[str(g)].get('p50')}/{out[str(g)].get('p99')} ms" for g in readers)
    )
    return {
        "by_large_accounts": out,
        "threshold": p.read_large_threshold,
        "readers_per_group": p.read_large_readers,
        "rate_per_s": p.read_rate,
        "short_pages": short,
        "method": (
            f"{most} large accounts (each with {p.read_large_threshold} bulk-loaded followers; the worker "
            f"ran with FANLINE_LARGE_ACCOUNT_FOLLOWERS={p.read_large_threshold} for this sub-phase) post "
            "2 tweets each after 5 ordinary authors posted 6 each; readers following 0, 10 or 100 of "
            "the large accounts (and the 5 ordinary ones) read `GET /v1/timeline?limit=20` in "
            f"alternating blocks of {p.read_block_s:g} s at {p.read_rate:g} requests/s."
        ),
    }
