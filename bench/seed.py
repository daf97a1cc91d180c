"""Followers bulk-loaded into social-graph's tables (harness only).

Authors are created through the API; their followers are not: 10,000+ sign-ups
(argon2 each) and follows (one lightweight transaction each) would dominate a
run without measuring anything. The harness — never the product — writes the
rows social-graph itself writes, with prepared statements, the rows of one
partition in unlogged single-partition batches; follower accounts get a real
argon2id hash of one password, so some log in as readers. No ``Followed``
events: nobody follows before the benchmark's tweets exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import combinations
from math import comb
from typing import Any

from cassandra.cluster import Session
from cassandra.concurrent import execute_concurrent, execute_concurrent_with_args

from fanline_shared.cassandra import batch, prepare

POOL_PASSWORD = "bench-password-1"
Edge = tuple[str, str]  # (follower, author)
ACTIVE_TTL_S = 8 * 24 * 3600  # longer than any run; social-graph renews the rows of followers who log in


def follower(stem: str, index: int) -> str:
    """Follower ``index`` of a pool (zero-padded: name order = index order)."""
    return f"{stem}_{index:07d}"


def pool_name(tag: str, index: int) -> str:
    return f"f{tag}_{index:05d}"


def celebrity_follower(tag: str, index: int) -> str:
    return follower(f"c{tag}", index)


@dataclass
class Graph:
    """Who follows whom: author -> its number of pool followers, the first N of the
    pool unless the author got a range of its own (``add_disjoint``)."""

    tag: str
    followers: dict[str, int] = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)

    @property
    def pool_size(self) -> int:
        return max((self.offsets.get(a, 0) + n for a, n in self.followers.items()), default=0)

    def followers_of(self, author: str) -> list[str]:
        return [pool_name(self.tag, self.offsets.get(author, 0) + i) for i in range(self.followers[author])]

    def add_disjoint(self, author: str, followers: int) -> None:
        """``author`` followed by ``followers`` accounts nobody added so far follows."""
        self.offsets[author], self.followers[author] = self.pool_size, followers

    def edges(self, authors: Sequence[str] | None = None) -> list[tuple[str, str]]:
        """(follower, author) pairs."""
        return [(f, a) for a in (self.followers if authors is None else authors) for f in self.followers_of(a)]


def distinct_follow_sets(readers: Sequence[str], authors: Sequence[str], follows: int) -> dict[str, list[str]]:
    """Reader -> the ``follows`` authors it follows, a different set for every reader,
    spread over all authors; ValueError if there are fewer sets than readers."""
    if not 0 < follows <= len(authors) or len(readers) > (total := comb(len(authors), follows)):
        raise ValueError(f"no {len(readers)} distinct sets of {follows} among {len(authors)} authors")
    sets, step, taken, out = list(combinations(range(len(authors)), follows)), max(1, total // max(1, len(readers))), set(), {}
    for i, reader in enumerate(readers):
        for attempt in range(2 * total):  # rotated sets first (every author followed), then the plain ones
            shift = i * step + attempt if attempt < total else 0
            candidate = tuple(sorted(authors[(c + shift) % len(authors)] for c in sets[(i * step + attempt) % total]))
            if candidate not in taken:
                break
        taken.add(candidate)
        out[reader] = list(candidate)
    return out


def _write(session: Session, cql: str, params: Sequence[Sequence[Any]], batched: bool = True) -> int:
    """Rows of one prepared statement (``batched``: rows sharing the first column, the
    partition key, in unlogged batches of 100); returns the rows written."""
    stmt, groups = prepare(session, cql, write=True), dict[Any, list[Sequence[Any]]]()
    if not batched:
        results = execute_concurrent_with_args(session, stmt, params, concurrency=256, raise_on_first_error=True)
    else:
        for row in params:
            groups.setdefault(row[0], []).append(row)
        chunks = [rows[i : i + 100] for rows in groups.values() for i in range(0, len(rows), 100)]
        batches = [(batch((stmt, r) for r in chunk), None) for chunk in chunks]
        results = execute_concurrent(session, batches, concurrency=256, raise_on_first_error=True)
    for ok, result in results:
        if not ok:  # pragma: no cover - raise_on_first_error raises first
            raise RuntimeError(f"bulk load failed: {result}")
    return len(params)


def bulk_load_edges(session: Session, keyspace: str, edges: Sequence[Edge], accounts: Sequence[str], active: bool = True) -> int:
    """(follower, author) ``edges``, with full accounts for ``accounts`` (the followers that
    log in); blocking. Only ``active`` edges get the ``followers_active`` rows the fan-out
    pages. Returns the rows written."""
    from argon2 import PasswordHasher

    now, users = datetime.now(UTC).replace(microsecond=0), [(u, u.lower()) for u in accounts]
    hashed = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1).hash(POOL_PASSWORD)
    followers: dict[str, int] = {}
    following = dict.fromkeys((lc for _, lc in users), 0)
    for f, a in edges:
        followers[a.lower()] = followers.get(a.lower(), 0) + 1
        if f.lower() in following:
            following[f.lower()] += 1
    ttl = f" USING TTL {ACTIVE_TTL_S}"
    tables = (  # (table and columns, rows, statement suffix)
        ("users (username_lc, username, password_hash, created_at)", [(lc, u, hashed, now) for u, lc in users], ""),
        ("users_by_prefix (prefix, username_lc, username, created_at)", [(lc[:2], lc, u, now) for u, lc in users], ""),
        ("user_activity (username_lc, last_seen)", [(lc, now) for _, lc in users], ""),
        ("following (follower_lc, followee_lc, followee, since)", [(f.lower(), a.lower(), a, now) for f, a in edges], ""),
        ("followers (followee_lc, follower_lc, follower, since)", [(a.lower(), f.lower(), f, now) for f, a in edges], ""),
        ("followers_active (followee_lc, follower_lc, follower)", [(a.lower(), f.lower(), f) for f, a in edges if active], ttl),
    )
    insert = "INSERT INTO {}.{} VALUES ({}){}"
    rows = sum(_write(session, insert.format(keyspace, t, ", ".join("?" * len(v[0])), x), v) for t, v, x in tables if v)
    counter = f"UPDATE {keyspace}.follow_counts SET {{0}} = {{0}} + ? WHERE username_lc = ?"
    rows += _write(session, counter.format("following"), [(n, u) for u, n in following.items() if n], batched=False)
    return rows + _write(session, counter.format("followers"), [(n, a) for a, n in followers.items()], batched=False)


def bulk_load_social_graph(session: Session, keyspace: str, graph: Graph) -> int:
    """Every edge of ``graph`` and a full account for every pool member; the rows written."""
    return bulk_load_edges(session, keyspace, graph.edges(), [pool_name(graph.tag, i) for i in range(graph.pool_size)])


def bulk_load_followers(session: Session, keyspace: str, edges: Sequence[Edge]) -> int:
    """The synchronous baseline's own ``followers`` table, the same rows as social-graph's."""
    now = datetime.now(UTC).replace(microsecond=0)
    cql = f"INSERT INTO {keyspace}.followers (followee_lc, follower_lc, follower, since) VALUES (?, ?, ?, ?)"
    return _write(session, cql, [(a.lower(), f.lower(), f, now) for f, a in edges])
