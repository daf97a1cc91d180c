"""Account ids and emails (the Mastodon-compatible API's accounts).

An account id is a 64-bit number ordered by sign-up time, like Mastodon's
own: ``created_at_ms << 16 | hash16(canonical name)``. The low half is a
hash rather than a counter so that a user's id can be computed again (the
backfill of users created before ids existed gives the same answer on every
replica); two users signing up in the same millisecond with colliding
hashes get the next free value (``users_by_id`` is written with an LWT, or
a unique index on SQLite). An email is optional, unique regardless of case,
and only used to log in.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime

from fanline_shared.errors import InvalidInput

# How many successive values a sign-up tries before giving up (503): more
# than 16 users colliding in one millisecond and hash is not expected.
MAX_ID_PROBES = 64
EMAIL_MAX = 254
_EMAIL_RE = re.compile(r"[^@\s]{1,64}@[^@\s.]+(\.[^@\s.]+)+")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def hash16(username_lc: str) -> int:
    return int.from_bytes(hashlib.sha256(username_lc.encode()).digest()[:2], "big")


def candidate_id(created_at: datetime, username_lc: str) -> int:
    """The account id a user gets unless that value is taken."""
    delta = created_at.astimezone(UTC) - _EPOCH
    ms = (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    return ms << 16 | hash16(username_lc)


def validate_email(value: object) -> str | None:
    """An email address as given (None when absent or empty), or ``invalid_email``."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > EMAIL_MAX or not _EMAIL_RE.fullmatch(value):
        raise InvalidInput("email must be an address like name@example.org", code="invalid_email")
    return value


def email_key(email: str) -> str:
    """The case-insensitive key an email is unique by."""
    return email.lower()
