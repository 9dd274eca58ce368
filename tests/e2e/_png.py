"""Read a PNG file far enough to know it is a whole, real picture (no imaging library)."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # by colour type: grey, RGB, palette, grey+A, RGBA


@dataclass(frozen=True, slots=True)
class Png:
    width: int
    height: int
    distinct_bytes: int  # in the decoded pixel rows: a blank page has a handful


def read_png(path: Path) -> Png:
    """Check the signature, every chunk's CRC, IHDR first and IEND last, and that the image
    data inflates to exactly ``height`` rows of ``width`` 8-bit pixels."""
    data = path.read_bytes()
    assert data.startswith(SIGNATURE), f"{path} is not a PNG"
    chunks: list[tuple[bytes, bytes]] = []
    pos = len(SIGNATURE)
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"{path}: bad CRC in a {kind!r} chunk"
        chunks.append((kind, body))
        pos += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1] == (b"IEND", b""), f"{path} is truncated"
    width, height, depth, colour = struct.unpack(">IIBB", chunks[0][1][:10])
    assert depth == 8, f"{path}: {depth}-bit samples"
    pixels = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    assert len(pixels) == height * (1 + width * CHANNELS[colour]), f"{path}: wrong data size"
    return Png(width, height, len(set(pixels)))
