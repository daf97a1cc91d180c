"""Every account's avatar and header: a generated default image, served as
a real PNG (apps show broken images, or crash, on a URL that does not load).

The avatar is an identicon — a 5x5 grid mirrored left to right, drawn in a
colour, both taken from a hash of the account id — and the header a strip of
that colour. They depend on the id alone, so they are drawn without a lookup
and cached (an LRU in the process, and ``Cache-Control`` for a day).

The PNG is written with the standard library (``zlib``, ``struct``): a few
filled squares do not justify Pillow's native code in the gateway's image.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from functools import lru_cache

from starlette.requests import Request
from starlette.responses import Response

CELL = 24  # pixels per grid cell: a 120 x 120 avatar (with a margin: 5 cells + 2 x 12 px = 144)
MARGIN = 12
HEADER_W, HEADER_H = 300, 100
BACKGROUND = (240, 240, 240)
CACHE = {"Cache-Control": "public, max-age=86400"}


def _png(width: int, height: int, rows: list[bytes]) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + row for row in rows)  # filter type 0 per row
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def _seed(key: str) -> bytes:
    return hashlib.sha256(f"fanline avatar {key}".encode()).digest()


def _colour(seed: bytes) -> tuple[int, int, int]:
    return (40 + seed[0] % 160, 40 + seed[1] % 160, 40 + seed[2] % 160)


@lru_cache(maxsize=4096)
def avatar_png(key: str) -> bytes:
    seed = _seed(key)
    colour = _colour(seed)
    bits = int.from_bytes(seed[3:7], "big")
    grid = [[False] * 5 for _ in range(5)]
    for row in range(5):
        for col in range(3):  # mirrored: columns 0-2 decide 4-2
            on = bool(bits >> (row * 3 + col) & 1)
            grid[row][col] = grid[row][4 - col] = on
    size = 5 * CELL + 2 * MARGIN
    rows = []
    for y in range(size):
        line = bytearray()
        for x in range(size):
            gx, gy = (x - MARGIN) // CELL, (y - MARGIN) // CELL
            inside = MARGIN <= x < size - MARGIN and MARGIN <= y < size - MARGIN
            line += bytes(colour if inside and grid[gy][gx] else BACKGROUND)
        rows.append(bytes(line))
    return _png(size, size, rows)


@lru_cache(maxsize=4096)
def header_png(key: str) -> bytes:
    colour = _colour(_seed(key))
    row = bytes(colour) * HEADER_W
    return _png(HEADER_W, HEADER_H, [row] * HEADER_H)


def _key(request: Request) -> str:
    raw = request.path_params["id"]
    return raw if raw.isascii() and raw.isdigit() and len(raw) <= 19 else "0"


async def avatar(request: Request) -> Response:
    return Response(avatar_png(_key(request)), media_type="image/png", headers=CACHE)


async def header(request: Request) -> Response:
    return Response(header_png(_key(request)), media_type="image/png", headers=CACHE)
