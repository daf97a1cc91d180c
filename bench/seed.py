"""Seeding: authors through the API, followers bulk-loaded (harness only).

Authors (the accounts that post) are created and logged in through the public
API, exactly as a user would. Their followers are not: creating 10,000+
follower accounts and edges through the API costs one argon2 hash per account
and one lightweight transaction per edge, which would dominate the run without
measuring anything the benchmark is about. So the harness — never the product
— writes follower accounts and edges straight into social-graph's keyspace,
into the same tables and with the same values social-graph would write
(``users``, ``users_by_prefix``, ``following``, ``followers``,
``followers_active``, ``user_activity``, ``follow_counts``), with prepared statements and the driver's
``execute_concurrent`` (rows of one partition in unlogged single-partition
batches). Follower accounts get a real argon2id hash of one
shared password, so some of them log in (as timeline readers) through the API.

No ``Followed`` events are published for bulk-loaded edges: nobody follows
before the benchmark's tweets exist, so there is nothing to merge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cassandra.cluster import Session
from cassandra.concurrent import execute_concurrent, execute_concurrent_with_args

from fanline_shared.cassandra import batch, prepare

POOL_PASSWORD = "bench-password-1"
BULK_CONCURRENCY = 256
BATCH_ROWS = 100  # rows per single-partition unlogged batch (one mutation each)
# Longer than any run; social-graph renews the rows of followers who log in.
ACTIVE_TTL_S = 8 * 24 * 3600
EDGE_CHUNK = 100_000


def pool_name(tag: str, index: int) -> str:
    """Follower ``index`` of the pool (zero-padded: name order = index order)."""
    return f"f{tag}_{index:05d}"


def celebrity_follower(tag: str, index: int) -> str:
    """Follower ``index`` of the celebrity phase's pool (seven digits: name
    order = index order up to 10,000,000)."""
    return f"c{tag}_{index:07d}"


@dataclass
class Graph:
    """Who follows whom in this run: author -> number of pool followers, the
    first N of the pool unless the author was given a range of its own
    (``add_disjoint``)."""

    tag: str
    followers: dict[str, int] = field(default_factory=dict)
    # author -> the pool index of its first follower (absent: 0)
    offsets: dict[str, int] = field(default_factory=dict)

    @property
    def pool_size(self) -> int:
        return max((self.offsets.get(a, 0) + n for a, n in self.followers.items()), default=0)

    def followers_of(self, author: str) -> list[str]:
        start = self.offsets.get(author, 0)
        return [pool_name(self.tag, start + i) for i in range(self.followers[author])]

    def add_disjoint(self, author: str, followers: int) -> None:
        """``author`` followed by ``followers`` pool accounts that follow
        nobody else: the range past every follower added so far (so add the
        first-N authors before these). Its followers' home timelines then
        hold its tweets alone, and are trimmed (``FANLINE_HOME_MAX_ROWS``)
        only once it alone has posted that many."""
        self.offsets[author] = self.pool_size
        self.followers[author] = followers

    def following_counts(self) -> dict[str, int]:
        """Pool follower -> how many authors it follows."""
        counts: dict[str, int] = {}
        for author in self.followers:
            for name in self.followers_of(author):
                counts[name] = counts.get(name, 0) + 1
        return counts


def distinct_follow_sets(readers: Sequence[str], authors: Sequence[str], follows: int) -> dict[str, list[str]]:
    """Reader -> the ``follows`` authors it follows, a different set for
    every reader (combinations spread evenly over all of them), so no two
    readers see the same home timeline. Raises ``ValueError`` when there are
    fewer distinct sets than readers."""
    from itertools import combinations
    from math import comb

    if not 0 < follows <= len(authors):
        raise ValueError("follows must be between 1 and the number of authors")
    total = comb(len(authors), follows)
    if len(readers) > total:
        raise ValueError(f"only {total} distinct sets of {follows} among {len(authors)} authors")
    sets = list(combinations(range(len(authors)), follows))
    step = max(1, total // len(readers)) if readers else 1
    taken: set[tuple[str, ...]] = set()
    out: dict[str, list[str]] = {}
    for i, reader in enumerate(readers):
        index = i * step
        picked: tuple[str, ...] = ()
        for attempt in range(2 * total):  # rotated sets first, then the plain ones (all distinct)
            chosen = sets[(index + attempt) % total]
            shift = index + attempt if attempt < total else 0  # rotated: every author followed
            candidate = tuple(sorted(authors[(c + shift) % len(authors)] for c in chosen))
            if candidate not in taken:
                picked = candidate
                break
        taken.add(picked)
        out[reader] = list(picked)
    return out


def argon2_hash(password: str) -> str:
    """An argon2id hash with the cheap parameters the bench system runs with."""
    from argon2 import PasswordHasher

    return PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1).hash(password)


def _run(session: Session, cql: str, params: Sequence[Sequence[Any]], *, partition: int | None = None) -> int:
    """Write ``params`` with one prepared statement; returns statements sent.

    ``partition``: index of the partition-key column in each tuple — rows of
    one partition then go in unlogged single-partition batches of up to
    ``BATCH_ROWS`` (one mutation on the replica each, far fewer round trips);
    without it every row is its own statement."""
    if not params:
        return 0
    stmt = prepare(session, cql, write=True)
    if partition is None:
        results = execute_concurrent_with_args(session, stmt, params, concurrency=BULK_CONCURRENCY, raise_on_first_error=True)
        sent = len(params)
    else:
        groups: dict[Any, list[Sequence[Any]]] = {}
        for row in params:
            groups.setdefault(row[partition], []).append(row)
        batches = [
            batch((stmt, r) for r in rows[i : i + BATCH_ROWS])
            for rows in groups.values()
            for i in range(0, len(rows), BATCH_ROWS)
        ]
        results = execute_concurrent(
            session, [(b, None) for b in batches], concurrency=BULK_CONCURRENCY, raise_on_first_error=True
        )
        sent = len(batches)
    for ok, result in results:
        if not ok:  # pragma: no cover - raise_on_first_error raises first
            raise RuntimeError(f"bulk load failed: {result}")
    return sent


def bulk_load_social_graph(
    session: Session, keyspace: str, graph: Graph, progress: Callable[[str], None] | None = None
) -> tuple[int, int]:
    """Write the pool users and every edge of ``graph`` into social-graph's
    tables (blocking; call from a thread). Returns (rows, statements)."""
    now = datetime.now(UTC).replace(microsecond=0)
    say = progress or (lambda _msg: None)
    password_hash = argon2_hash(POOL_PASSWORD)
    pool = [pool_name(graph.tag, i) for i in range(graph.pool_size)]
    edges = [(f, a) for a in graph.followers for f in graph.followers_of(a)]
    following = graph.following_counts()
    say(f"bulk-loading {len(pool):,} follower accounts and {len(edges):,} follow edges into {keyspace}")
    sent = _run(
        session,
        f"INSERT INTO {keyspace}.users (username_lc, username, password_hash, created_at) VALUES (?, ?, ?, ?)",
        [(u, u, password_hash, now) for u in pool],
    )
    sent += _run(
        session,
        f"INSERT INTO {keyspace}.users_by_prefix (prefix, username_lc, username, created_at) VALUES (?, ?, ?, ?)",
        [(u[:2], u, u, now) for u in pool],
        partition=0,
    )
    sent += _run(
        session,
        f"INSERT INTO {keyspace}.following (follower_lc, followee_lc, followee, since) VALUES (?, ?, ?, ?)",
        [(f, a.lower(), a, now) for f, a in edges],
        partition=0,
    )
    sent += _run(
        session,
        f"INSERT INTO {keyspace}.followers (followee_lc, follower_lc, follower, since) VALUES (?, ?, ?, ?)",
        [(a.lower(), f, f, now) for f, a in edges],
        partition=0,
    )
    # Seeded followers are active users: in the index the fan-out pages, and
    # seen now (they read timelines in the run without being "back").
    sent += _run(
        session,
        f"INSERT INTO {keyspace}.followers_active (followee_lc, follower_lc, follower) VALUES (?, ?, ?) USING TTL {ACTIVE_TTL_S}",
        [(a.lower(), f, f) for f, a in edges],
        partition=0,
    )
    sent += _run(
        session, f"INSERT INTO {keyspace}.user_activity (username_lc, last_seen) VALUES (?, ?)", [(u, now) for u in pool]
    )
    sent += _run(
        session,
        f"UPDATE {keyspace}.follow_counts SET following = following + ? WHERE username_lc = ?",
        [(n, f) for f, n in following.items()],
    )
    sent += _run(
        session,
        f"UPDATE {keyspace}.follow_counts SET followers = followers + ? WHERE username_lc = ?",
        [(n, a.lower()) for a, n in graph.followers.items() if n],
    )
    rows = 3 * len(pool) + 3 * len(edges) + len(following) + sum(1 for n in graph.followers.values() if n)
    return rows, sent


def bulk_load_followers_table(session: Session, keyspace: str, graph: Graph, authors: Iterable[str]) -> int:
    """The baseline's own ``followers`` table, same rows as social-graph's."""
    now = datetime.now(UTC).replace(microsecond=0)
    rows = [(a.lower(), f, f, now) for a in authors for f in graph.followers_of(a)]
    _run(
        session,
        f"INSERT INTO {keyspace}.followers (followee_lc, follower_lc, follower, since) VALUES (?, ?, ?, ?)",
        rows,
        partition=0,
    )
    return len(rows)


def bulk_load_edges(
    session: Session,
    keyspace: str,
    edges: Sequence[tuple[str, str]],
    accounts: Sequence[str],
    progress: Callable[[str], None] | None = None,
) -> tuple[int, int]:
    """Follow ``edges`` ((follower, author) pairs, names as written) into
    social-graph's tables, and full accounts for ``accounts`` (blocking; call
    from a thread). Returns (rows, statements).

    Every edge gets its ``following``, ``followers`` and ``followers_active``
    rows and the authors' follower counters. Only ``accounts`` — the followers
    that log in — also get ``users``, ``users_by_prefix``, ``user_activity``
    and their following counter: the other followers of a 1,000,000-follower
    author never log in, and no measured path reads those rows for them (the
    fan-out pages ``followers_active``), so writing them would only lengthen
    the seeding by minutes."""
    now = datetime.now(UTC).replace(microsecond=0)
    say = progress or (lambda _msg: None)
    password_hash = argon2_hash(POOL_PASSWORD)
    say(f"bulk-loading {len(edges):,} follow edges and {len(accounts):,} accounts into {keyspace}")
    sent = _run(
        session,
        f"INSERT INTO {keyspace}.users (username_lc, username, password_hash, created_at) VALUES (?, ?, ?, ?)",
        [(u.lower(), u, password_hash, now) for u in accounts],
    )
    sent += _run(
        session,
        f"INSERT INTO {keyspace}.users_by_prefix (prefix, username_lc, username, created_at) VALUES (?, ?, ?, ?)",
        [(u.lower()[:2], u.lower(), u, now) for u in accounts],
        partition=0,
    )
    sent += _run(
        session,
        f"INSERT INTO {keyspace}.user_activity (username_lc, last_seen) VALUES (?, ?)",
        [(u.lower(), now) for u in accounts],
    )
    for i in range(0, len(edges), EDGE_CHUNK):  # bounded memory for the statements of 1,000,000 edges
        chunk = edges[i : i + EDGE_CHUNK]
        sent += _run(
            session,
            f"INSERT INTO {keyspace}.following (follower_lc, followee_lc, followee, since) VALUES (?, ?, ?, ?)",
            [(f.lower(), a.lower(), a, now) for f, a in chunk],
            partition=0,
        )
        sent += _run(
            session,
            f"INSERT INTO {keyspace}.followers (followee_lc, follower_lc, follower, since) VALUES (?, ?, ?, ?)",
            [(a.lower(), f.lower(), f, now) for f, a in chunk],
            partition=0,
        )
        sent += _run(
            session,
            f"INSERT INTO {keyspace}.followers_active (followee_lc, follower_lc, follower) "
            f"VALUES (?, ?, ?) USING TTL {ACTIVE_TTL_S}",
            [(a.lower(), f.lower(), f) for f, a in chunk],
            partition=0,
        )
        if len(edges) > EDGE_CHUNK:
            say(f"  {min(i + EDGE_CHUNK, len(edges)):,} / {len(edges):,} edges")
    followers: dict[str, int] = {}
    following: dict[str, int] = {}
    wanted = {u.lower() for u in accounts}
    for f, a in edges:
        followers[a.lower()] = followers.get(a.lower(), 0) + 1
        if f.lower() in wanted:
            following[f.lower()] = following.get(f.lower(), 0) + 1
    sent += _run(
        session,
        f"UPDATE {keyspace}.follow_counts SET following = following + ? WHERE username_lc = ?",
        [(n, f) for f, n in following.items()],
    )
    sent += _run(
        session,
        f"UPDATE {keyspace}.follow_counts SET followers = followers + ? WHERE username_lc = ?",
        [(n, a) for a, n in followers.items()],
    )
    return 3 * len(accounts) + 3 * len(edges) + len(following) + len(followers), sent
