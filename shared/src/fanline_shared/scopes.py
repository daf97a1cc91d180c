"""OAuth scopes, as Mastodon defines them (config/initializers/doorkeeper.rb,
Mastodon.py's ``_SCOPE_SETS``), for every token Fanline issues.

A token carries a set of scopes. ``read``, ``write`` and ``follow`` stand for
groups (``read`` grants every ``read:*`` scope, ``write`` every ``write:*``,
``follow`` the follow-related ones: Mastodon's table); a route names the
scopes any one of which admits it (Mastodon's ``doorkeeper_authorize! :write,
:'write:statuses'``). Tokens of ``/v1/sessions`` carry ``FULL``, so the
``/v1`` API behaves as before for them; a read-only token gets ``403`` on a
post on both APIs. social-graph validates scopes when it stores apps, codes
and tokens; the gateway enforces them per route.
"""

from __future__ import annotations

from collections.abc import Iterable

from .errors import InvalidInput

READ_SCOPES = (
    "read:accounts",
    "read:blocks",
    "read:bookmarks",
    "read:favourites",
    "read:filters",
    "read:follows",
    "read:lists",
    "read:mutes",
    "read:notifications",
    "read:search",
    "read:statuses",
)
WRITE_SCOPES = (
    "write:accounts",
    "write:blocks",
    "write:bookmarks",
    "write:conversations",
    "write:favourites",
    "write:filters",
    "write:follows",
    "write:lists",
    "write:media",
    "write:mutes",
    "write:notifications",
    "write:reports",
    "write:statuses",
)
FOLLOW_SCOPES = ("read:blocks", "read:follows", "read:mutes", "write:blocks", "write:follows", "write:mutes")
GROUPS: dict[str, tuple[str, ...]] = {"read": READ_SCOPES, "write": WRITE_SCOPES, "follow": FOLLOW_SCOPES}
# Accepted and granted as asked, but no route needs them (no push, no OpenID).
OTHER_SCOPES = ("push", "profile")
KNOWN = frozenset((*GROUPS, *READ_SCOPES, *WRITE_SCOPES, *OTHER_SCOPES))

FULL = "read write follow push"  # every /v1/sessions token
DEFAULT = "read"  # Mastodon's default when an app or a token request names none

# What routes ask for (any one of the listed scopes admits).
READ_STATUSES = ("read", "read:statuses")
READ_ACCOUNTS = ("read", "read:accounts")
READ_FOLLOWS = ("read", "follow", "read:follows")
READ_SEARCH = ("read", "read:search")
WRITE_STATUSES = ("write", "write:statuses")
WRITE_FOLLOWS = ("write", "follow", "write:follows")
WRITE_ACCOUNTS = ("write", "write:accounts")


class InvalidScope(InvalidInput):
    """A scope Fanline does not know, or one the app was not registered for."""

    code = "invalid_scope"


def parse(raw: str | Iterable[str] | None, default: str = DEFAULT) -> tuple[str, ...]:
    """Scopes from a space (or ``+``) separated string or a list, each once,
    in the order given; ``default`` when none; ``InvalidScope`` for unknown ones."""
    if raw is None:
        items: list[str] = []
    elif isinstance(raw, str):
        items = raw.replace("+", " ").split()
    else:
        items = [part for value in raw for part in str(value).replace("+", " ").split()]
    if not items:
        items = default.split()
    unknown = [s for s in items if s not in KNOWN]
    if unknown:
        raise InvalidScope(f"unknown scope {unknown[0][:40]!r}")
    return tuple(dict.fromkeys(items))


def expand(scopes: Iterable[str]) -> frozenset[str]:
    """The scopes and everything their groups grant."""
    out = set(scopes)
    for scope in list(out):
        out.update(GROUPS.get(scope, ()))
    return frozenset(out)


def grants(scopes: Iterable[str], *needed: str) -> bool:
    """Whether ``scopes`` admit a route that needs any one of ``needed``."""
    have = expand(scopes)
    return any(n in have for n in needed)


def covers(granted: Iterable[str], requested: Iterable[str]) -> bool:
    """Whether every requested scope is granted (directly or by a group)."""
    have = expand(granted)
    return all(r in have for r in requested)


def text(scopes: Iterable[str]) -> str:
    return " ".join(scopes)
