"""Mastodon's entities (Account, CredentialAccount, Status, Relationship,
Application, Token), rendered from Fanline's profiles and tweets.

The fields are those of Mastodon's REST serializers (app/serializers/rest/)
and of the JSON Mastodon.py's recorded tests hold (``tests/unit/
test_mastodon_shapes.py`` compares them): lists are ``[]``, never null;
times ``2026-11-26T13:34:22.388Z``; ids strings of digits. What Fanline has
no notion of is constant: no media, replies, boosts, favourites, polls,
custom emoji, profile fields, bots, locked accounts.

``content`` is the tweet's body escaped as HTML, paragraphs on blank lines
and ``<br />`` for single line breaks: a body containing ``<script>``
arrives as text. ``base`` is the public URL of this server (settings, else
the request's), without a trailing slash.
"""

from __future__ import annotations

import html
from typing import Any

from fanline_shared import scopes as scope_rules

MISSING_AVATAR = "/avatars/{id}.png"
MISSING_HEADER = "/headers/{id}.png"


def iso_ms(rfc3339: str) -> str:
    """``2026-11-26T13:34:22.388451Z`` -> ``2026-11-26T13:34:22.388Z``."""
    return rfc3339[:23] + "Z" if len(rfc3339) >= 23 and rfc3339[19] == "." else rfc3339


def midnight(rfc3339: str) -> str:
    """Mastodon shows when an account was created to the day."""
    return rfc3339[:10] + "T00:00:00.000Z"


def content_html(body: str) -> str:
    paragraphs = [p for p in body.replace("\r\n", "\n").split("\n\n") if p.strip()] or [body]
    return "".join("<p>" + html.escape(p, quote=True).replace("\n", "<br />") + "</p>" for p in paragraphs)


def account(profile: dict[str, Any], base: str) -> dict[str, Any]:
    name = str(profile["username"])
    account_id = str(profile["id"])
    avatar = base + MISSING_AVATAR.format(id=account_id)
    header = base + MISSING_HEADER.format(id=account_id)
    return {
        "id": account_id,
        "username": name,
        "acct": name,
        "display_name": name,
        "locked": False,
        "bot": False,
        "discoverable": True,
        "indexable": False,
        "group": False,
        "created_at": midnight(str(profile["created_at"])),
        "note": "",
        "url": f"{base}/@{name}",
        "uri": f"{base}/users/{name}",
        "avatar": avatar,
        "avatar_static": avatar,
        "avatar_description": "",
        "header": header,
        "header_static": header,
        "header_description": "",
        "followers_count": int(profile.get("followers_count", 0)),
        "following_count": int(profile.get("following_count", 0)),
        "statuses_count": int(profile.get("tweets_count", 0)),
        "last_status_at": None,
        "hide_collections": False,
        "noindex": False,
        "emojis": [],
        "roles": [],
        "fields": [],
    }


def credential_account(profile: dict[str, Any], base: str) -> dict[str, Any]:
    """``verify_credentials``: the account, its ``source`` (what a profile
    editor shows) and its role (none)."""
    return {
        **account(profile, base),
        "source": {
            "privacy": "public",
            "sensitive": False,
            "language": None,
            "note": "",
            "fields": [],
            "follow_requests_count": 0,
            "hide_collections": False,
            "discoverable": True,
            "indexable": False,
            "attribution_domains": [],
            "quote_policy": "public",
        },
        "role": {"id": "-99", "name": "", "permissions": "0", "color": "", "highlighted": False},
    }


def status(tweet: dict[str, Any], author: dict[str, Any], base: str, *, source: bool = False) -> dict[str, Any]:
    """A tweet as a Status; ``author`` is its account entity. ``source``:
    the deleted status Mastodon returns, with ``text`` instead of ``content``."""
    sid = str(tweet["sid"])
    name = str(author["username"])
    out: dict[str, Any] = {
        "id": sid,
        "created_at": iso_ms(str(tweet["created_at"])),
        "in_reply_to_id": None,
        "in_reply_to_account_id": None,
        "sensitive": False,
        "spoiler_text": "",
        "visibility": "public",
        "language": None,
        "uri": f"{base}/users/{name}/statuses/{sid}",
        "url": f"{base}/@{name}/{sid}",
        "replies_count": 0,
        "reblogs_count": 0,
        "favourites_count": 0,
        "quotes_count": 0,
        "edited_at": None,
        "favourited": False,
        "reblogged": False,
        "muted": False,
        "bookmarked": False,
        "pinned": False,
        "filtered": [],
        "reblog": None,
        "application": None,
        "account": author,
        "media_attachments": [],
        "mentions": [],
        "tags": [],
        "emojis": [],
        "card": None,
        "poll": None,
        "quote": None,
    }
    if source:
        out["text"] = tweet["body"]
    else:
        out["content"] = content_html(str(tweet["body"]))
    return out


def relationship(account_id: str, following: bool, followed_by: bool) -> dict[str, Any]:
    return {
        "id": account_id,
        "following": following,
        "showing_reblogs": following,
        "notifying": False,
        "languages": None,
        "followed_by": followed_by,
        "blocking": False,
        "blocked_by": False,
        "muting": False,
        "muting_notifications": False,
        "muting_expires_at": None,
        "requested": False,
        "requested_by": False,
        "domain_blocking": False,
        "endorsed": False,
        "note": "",
    }


def application(app: dict[str, Any], *, secret: str | None = None) -> dict[str, Any]:
    """An app as ``/api/v1/apps`` (with its secret, once) and
    ``/api/v1/apps/verify_credentials`` show it."""
    out: dict[str, Any] = {
        "id": app["client_id"][:16],
        "name": app["name"],
        "website": app.get("website"),
        "scopes": list(app.get("scopes") or [scope_rules.DEFAULT]),
        "redirect_uris": list(app.get("redirect_uris") or []),
        "redirect_uri": app.get("redirect_uri", ""),
        "vapid_key": "",
    }
    if secret is not None:
        out.update(client_id=app["client_id"], client_secret=secret, client_secret_expires_at=0)
    return out
