"""Opaque, tamper-evident cursors.

A cursor is the internal position (a tweet id or a username) plus the kind of
list it belongs to, signed with HMAC-SHA256 and base64url-encoded. Anything
the server did not produce — edited, truncated, from another list — fails
verification and becomes ``400 invalid_cursor``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from fanline_shared.domain import parse_tweet_id
from fanline_shared.errors import BadRequest, InvalidInput

_SIG_BYTES = 12


class CursorCodec:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _sign(self, payload: bytes) -> bytes:
        return hmac.new(self._secret, payload, hashlib.sha256).digest()[:_SIG_BYTES]

    def encode(self, kind: str, position: str) -> str:
        payload = f"{kind}\x1f{position}".encode()
        return base64.urlsafe_b64encode(payload + self._sign(payload)).decode().rstrip("=")

    def decode(self, kind: str, cursor: str | None) -> str | None:
        """The position inside a cursor for list ``kind``; None for no cursor."""
        if cursor is None:
            return None
        invalid = BadRequest("cursor was not produced by this server", code="invalid_cursor")
        if not cursor or len(cursor) > 256:
            raise invalid
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        except (ValueError, TypeError):
            raise invalid from None
        payload, signature = raw[:-_SIG_BYTES], raw[-_SIG_BYTES:]
        if len(raw) <= _SIG_BYTES or not hmac.compare_digest(signature, self._sign(payload)):
            raise invalid
        got_kind, _, position = payload.decode(errors="replace").partition("\x1f")
        if got_kind != kind:
            raise invalid
        return position


# Timeline cursors carry the page's lower bound (``since_id``) beside the
# position, so that "next page" never crosses it even if the client does not
# repeat ``since_id``. Tweet ids never contain the separator.
_SINCE_SEP = "|"


def validate_since_id(raw: str | None) -> str | None:
    """A canonical version-1 UUID (a tweet id), None when absent, or ``422 invalid_since_id``."""
    if raw is None:
        return None
    if parse_tweet_id(raw) is None:
        raise InvalidInput("since_id must be a tweet id", code="invalid_since_id")
    return raw.lower()


def encode_timeline(codec: CursorCodec, kind: str, before: str, since: str | None) -> str:
    return codec.encode(kind, f"{before}{_SINCE_SEP}{since}" if since else before)


def decode_timeline(codec: CursorCodec, kind: str, cursor: str | None) -> tuple[str | None, str | None]:
    """``(before, since)`` from a timeline cursor; cursors from before since_id
    existed carry no bound."""
    position = codec.decode(kind, cursor)
    if position is None:
        return None, None
    before, _, since = position.partition(_SINCE_SEP)
    return before, since or None
