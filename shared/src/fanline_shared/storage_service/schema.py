"""A storage service's schema: its own migrations and the outbox's, composed.

Both engines apply migrations positionally (version = index + 1, recorded in
SQLite's ``user_version`` or Cassandra's ``schema_migrations``), so the
composed order of every migration that has shipped must never change. Each
``Migration`` carries the project-wide schema ``revision`` it was written in;
``compose`` orders by revision and, within one revision, keeps the tracks in
the order given (the service's own first) and each track's own order. A new
migration — a service's or the outbox's — takes the next revision and so
lands at the end of every list it belongs to.

Revisions so far: 1 the first schema and the outbox tables; 2 the outbox's
``published`` flag (SQLite); 3 the services' deleted-tweet, hybrid-home and
activity tables; 4 the outbox's request id; 5 outbox rows that never expire
(Cassandra); 6 the relay lease; 7 the Mastodon-compatible API's tables
(status-id slots; account ids, emails, token grants, OAuth apps and codes).
``tests/unit/test_storage_schema.py`` pins the composed lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    """One migration script and the schema revision it belongs to."""

    revision: int
    script: str


def compose(*tracks: Sequence[Migration]) -> tuple[str, ...]:
    """The scripts of every track in one positional list (see the module docstring)."""
    ranked = [(m.revision, t, i, m.script) for t, track in enumerate(tracks) for i, m in enumerate(track)]
    return tuple(script for *_, script in sorted(ranked, key=lambda r: r[:3]))
