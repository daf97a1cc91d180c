"""Domain types and rules shared by every service.

Records are small frozen dataclasses; the rules (what a valid username,
password or tweet body is) live here once so the gateway and the owning
services agree.
"""

from __future__ import annotations

import functools
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .errors import InvalidInput

# Always used with fullmatch: with match(), "$" also matches before a final
# newline, and "carol\n" was accepted as a username.
USERNAME_RE = re.compile(r"[A-Za-z0-9_]{1,15}")
PASSWORD_MIN, PASSWORD_MAX = 8, 256
BODY_MAX = 280
LIMIT_MIN, LIMIT_MAX, LIMIT_DEFAULT = 1, 100, 20
MAX_USERNAMES_PER_LOOKUP = 100

_UUID_EPOCH = datetime(1582, 10, 15, tzinfo=UTC)


def validate_username(value: object) -> str:
    """Return the username as given (display case) or raise ``invalid_username``."""
    if not isinstance(value, str) or not USERNAME_RE.fullmatch(value):
        raise InvalidInput("username must be 1-15 characters of A-Z, a-z, 0-9 and _", code="invalid_username")
    return value


def is_valid_username(value: str) -> bool:
    return isinstance(value, str) and USERNAME_RE.fullmatch(value) is not None


def validate_password(value: object) -> str:
    if not isinstance(value, str) or not PASSWORD_MIN <= len(value) <= PASSWORD_MAX:
        raise InvalidInput(f"password must be {PASSWORD_MIN}-{PASSWORD_MAX} characters", code="invalid_password")
    return value


def validate_body(value: object) -> str:
    """Trim surrounding white space; 1-280 code points remain or ``invalid_body``."""
    if not isinstance(value, str):
        raise InvalidInput("body must be a string", code="invalid_body")
    body = value.strip()
    if not 1 <= len(body) <= BODY_MAX:
        raise InvalidInput(f"body must be 1-{BODY_MAX} characters after trimming", code="invalid_body")
    if "\x00" in body:
        raise InvalidInput("body must not contain NUL characters", code="invalid_body")
    return body


def validate_limit(raw: str | None) -> int:
    if raw is None or raw == "":
        return LIMIT_DEFAULT
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(f"limit must be an integer {LIMIT_MIN}-{LIMIT_MAX}", code="invalid_limit") from None
    if not LIMIT_MIN <= value <= LIMIT_MAX:
        raise InvalidInput(f"limit must be {LIMIT_MIN}-{LIMIT_MAX}", code="invalid_limit")
    return value


def canonical(username: str) -> str:
    """The case-insensitive key of a username."""
    return username.lower()


def utcnow() -> datetime:
    return datetime.now(UTC)


def to_rfc3339(value: datetime) -> str:
    """``2026-11-22T10:15:30.123456Z`` — always UTC, always microseconds."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


# --- time-based ids -------------------------------------------------------


def new_timeuuid(when: datetime | None = None) -> uuid.UUID:
    """A version-1 UUID whose timestamp is ``when`` (default now), random node.

    A random node and clock sequence keep ids unique across processes without a
    MAC address; ids generated in one process within the same 100 ns tick are
    still unique thanks to the random clock sequence.
    """
    if when is None:
        return uuid.uuid1(node=uuid.getnode() ^ _random_bits(48), clock_seq=_random_bits(14))
    return _timeuuid_from_ticks(_ticks(when), _random_bits(14), _random_bits(48) | 0x010000000000)


def min_timeuuid(when: datetime) -> uuid.UUID:
    """Smallest timeuuid of a given instant (for range bounds)."""
    return _timeuuid_from_ticks(_ticks(when), 0, 0)


def _ticks(when: datetime) -> int:
    """100 ns intervals since the UUID epoch, in exact integer arithmetic."""
    delta = when - _UUID_EPOCH
    return (delta.days * 86_400 + delta.seconds) * 10_000_000 + delta.microseconds * 10


def _timeuuid_from_ticks(ticks: int, clock_seq: int, node: int) -> uuid.UUID:
    time_low = ticks & 0xFFFFFFFF
    time_mid = (ticks >> 32) & 0xFFFF
    time_hi_version = ((ticks >> 48) & 0x0FFF) | (1 << 12)
    clock_seq_low = clock_seq & 0xFF
    clock_seq_hi_variant = ((clock_seq >> 8) & 0x3F) | 0x80
    return uuid.UUID(fields=(time_low, time_mid, time_hi_version, clock_seq_hi_variant, clock_seq_low, node))


def _random_bits(n: int) -> int:
    import secrets

    return secrets.randbits(n)


def timeuuid_time(value: uuid.UUID) -> datetime:
    """The creation instant encoded in a version-1 UUID."""
    return _UUID_EPOCH + timedelta(microseconds=value.time // 10)


def timeuuid_rfc3339(value: uuid.UUID) -> str:
    """``to_rfc3339(timeuuid_time(value))`` without a ``datetime`` per call:
    the hot path of every tweet body (20 per timeline page). The text of the
    whole second is cached; only the microseconds are formatted."""
    seconds, micros = divmod(value.time // 10, 1_000_000)
    return f"{_second_rfc3339(seconds)}.{micros:06d}Z"


@functools.lru_cache(maxsize=4096)
def _second_rfc3339(seconds: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` of whole seconds since the UUID epoch."""
    return (_UUID_EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")


def timeuuid_sort_key(value: uuid.UUID) -> str:
    """A string that sorts like the timeuuid's time (then its other bits).

    The embedded (SQLite) adapters store it to order rows the way Cassandra's
    ``timeuuid`` clustering order does.
    """
    # f"{value.time:015x}{value.clock_seq:04x}{value.node:012x}", from the
    # integer once instead of through six UUID properties (0.7 against 1.3
    # µs; home pages sort and compare ids by it).
    i = value.int
    ticks = ((i >> 64) & 0x0FFF) << 48 | ((i >> 80) & 0xFFFF) << 32 | i >> 96
    return f"{ticks:015x}{i & 0x3FFF_FFFF_FFFF_FFFF:016x}"


def parse_tweet_id(raw: str) -> uuid.UUID | None:
    """A canonical version-1 UUID, or None for anything else."""
    try:
        value = uuid.UUID(raw)
    except (ValueError, AttributeError, TypeError):
        return None
    if value.version != 1 or str(value) != raw.lower():
        return None
    return value


# --- records ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class User:
    """A user as stored by social-graph (display-case username).

    ``account_id``: the numeric id of the Mastodon-compatible API
    (``created_at_ms << 16 | hash16(name)``, social-graph's accounts.py);
    0 until one is assigned. ``email``: optional, unique, for log-in."""

    username: str
    created_at: datetime
    account_id: int = 0
    email: str | None = None


@dataclass(frozen=True, slots=True)
class Session:
    """A bearer token's grant: whose it is (``username``; "" for an app's own
    token, ``kind`` "app"), its OAuth scopes, and the app it was issued to
    (None for a ``/v1/sessions`` token). ``expires_at`` None: until revoked."""

    username: str
    expires_at: datetime | None
    scopes: str = "read write follow push"
    client_id: str | None = None
    kind: str = "user"


@dataclass(frozen=True, slots=True)
class Edge:
    """One entry of a following or followers list."""

    username: str
    since: datetime


@dataclass(frozen=True, slots=True)
class Tweet:
    id: uuid.UUID
    username: str
    body: str

    @property
    def created_at(self) -> datetime:
        return timeuuid_time(self.id)


@dataclass(frozen=True, slots=True)
class OutboxEvent:
    """An event stored atomically with the state change that caused it.

    ``key`` is the Kafka message key (the author's canonical username), and
    ``payload`` the serialised event (see ``fanline_shared.events``).
    ``request_id``: the request that caused it (``logs.py``), stored with the
    row and published as a Kafka header, so its fan-out can be followed.
    """

    id: uuid.UUID
    key: str
    payload: bytes
    request_id: str | None = None
