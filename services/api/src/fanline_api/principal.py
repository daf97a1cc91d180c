"""Who a bearer token speaks for, and the scope checks of both APIs.

social-graph's token store answers with a grant (``GET
/internal/sessions/current``): the user (or, for an app's own token from the
client-credentials grant, none), the token's OAuth scopes and its app. The
gateway turns it into a ``Principal`` and checks it per route: a user's token
whose scopes admit the route (``fanline_shared.scopes``). ``/v1`` and the
Mastodon-compatible API share this, so a read-only token gets ``403`` on a
post on both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fanline_shared import scopes as scope_rules
from fanline_shared.errors import Forbidden, Unauthorized


class InsufficientScope(Forbidden):
    """The token's scopes do not admit this route (403)."""

    code = "insufficient_scope"


class NotAUser(Unauthorized):
    """An app's own token where a user's is needed: ``401`` on ``/v1`` (no
    user signed in); Mastodon answers ``422`` (``require_user!``)."""


@dataclass(frozen=True, slots=True)
class Principal:
    username: str  # "" for an app's own token
    kind: str  # "user" or "app"
    scopes: tuple[str, ...]
    client_id: str | None = None
    returned_at: str | None = None  # came back from inactivity (users)

    @classmethod
    def from_grant(cls, grant: dict[str, Any]) -> Principal:
        return cls(
            username=str(grant.get("username") or ""),
            kind=str(grant.get("kind") or "user"),
            scopes=tuple(str(grant.get("scopes") or scope_rules.FULL).split()),
            client_id=grant.get("client_id"),
            returned_at=grant.get("returned_at"),
        )

    def allows(self, need: tuple[str, ...]) -> bool:
        return scope_rules.grants(self.scopes, *need)

    def require(self, need: tuple[str, ...] | None) -> None:
        if need and not self.allows(need):
            raise InsufficientScope(
                f"this action is outside the token's scopes (it needs {' or '.join(need)})", code="insufficient_scope"
            )
