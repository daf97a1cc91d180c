"""Cursors are opaque and tamper-evident (services/api/cursors.py)."""

from __future__ import annotations

import base64

import pytest

from fanline_api.cursors import CursorCodec
from fanline_shared.errors import BadRequest

codec = CursorCodec(b"secret")


def test_round_trip() -> None:
    cursor = codec.encode("tl:public", "some-position")
    assert codec.decode("tl:public", cursor) == "some-position"
    assert codec.decode("tl:public", None) is None


def test_cursor_is_url_safe() -> None:
    cursor = codec.encode("followers", "abc")
    assert all(c.isalnum() or c in "-_" for c in cursor)


@pytest.mark.parametrize(
    "cursor",
    ["", "garbage", "!!!", "A" * 300, base64.urlsafe_b64encode(b"tl:public\x1fpos").decode()],
    ids=["empty", "garbage", "symbols", "huge", "unsigned"],
)
def test_forged_cursors_are_rejected(cursor: str) -> None:
    with pytest.raises(BadRequest) as err:
        codec.decode("tl:public", cursor)
    assert err.value.code == "invalid_cursor"


def test_cursor_of_another_list_or_key_is_rejected() -> None:
    cursor = codec.encode("tl:user", "pos")
    with pytest.raises(BadRequest):
        codec.decode("tl:public", cursor)
    with pytest.raises(BadRequest):
        CursorCodec(b"other secret").decode("tl:user", cursor)


def test_flipping_any_byte_is_detected() -> None:
    cursor = codec.encode("tl:home", "1044da6b-e61b-11f1-9151-88a70954b0ca")
    raw = bytearray(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    for i in range(len(raw)):
        tampered = bytearray(raw)
        tampered[i] ^= 0x01
        forged = base64.urlsafe_b64encode(bytes(tampered)).decode().rstrip("=")
        with pytest.raises(BadRequest):
            codec.decode("tl:home", forged)
