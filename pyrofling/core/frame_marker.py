"""A frame id and capture time written into the picture itself, read back after decoding.

Pure (numpy only).  The test scene paints a band of black and white luma
blocks at the top of every frame; after the real encoder, network and decoder,
the viewer reads them back.  That measures capture-to-decoded latency through
the actual codec, and proves which frame is on screen, instead of trusting
the packet timestamps.

Layout: 96 bits, most significant first — magic (8), frame id (32), capture
time in µs of the host's clock (48), CRC-8 of the previous 88 bits (8).  Bits
are ``block`` × ``block`` squares (``block`` even, so chroma lines up),
``width // block`` per row, as many rows as needed.  Luma 255 is a one, 0 a
zero; the reader samples the centre of each block and thresholds at 128, so
ordinary compression noise cannot flip a bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

MAGIC = 0xA5
BITS = 96


@dataclass(frozen=True, slots=True)
class FrameStamp:
    frame_id: int  # u32, wraps
    capture_us: int  # low 48 bits of the host clock, µs


@dataclass(frozen=True, slots=True)
class MarkerLayout:
    block: int
    per_row: int
    rows: int

    @property
    def height(self) -> int:
        return self.rows * self.block


def layout_for(width: int) -> MarkerLayout | None:
    """The marker geometry for a frame width, or None if the frame is too narrow to carry it."""
    block = max(8, 2 * (width // 192))
    per_row = width // block
    if per_row < 16:
        return None
    return MarkerLayout(block=block, per_row=per_row, rows=-(-BITS // per_row))


def _crc8(value: int, nbits: int) -> int:
    """CRC-8 (polynomial 0x07) over ``nbits`` bits of ``value``, most significant first."""
    crc = 0
    for i in range(nbits - 1, -1, -1):
        bit = (value >> i) & 1
        top = (crc >> 7) & 1
        crc = (crc << 1) & 0xFF
        if bit ^ top:
            crc ^= 0x07
    return crc


def encode_bits(stamp: FrameStamp) -> npt.NDArray[np.bool_]:
    body = (MAGIC << 80) | ((stamp.frame_id & 0xFFFFFFFF) << 48) | (stamp.capture_us & ((1 << 48) - 1))
    word = (body << 8) | _crc8(body, 88)
    return np.array([(word >> (BITS - 1 - i)) & 1 for i in range(BITS)], dtype=bool)


def decode_bits(bits: npt.NDArray[np.bool_]) -> FrameStamp | None:
    word = 0
    for b in bits[:BITS]:
        word = (word << 1) | int(b)
    body, crc = word >> 8, word & 0xFF
    if body >> 80 != MAGIC or _crc8(body, 88) != crc:
        return None
    return FrameStamp(frame_id=(body >> 48) & 0xFFFFFFFF, capture_us=body & ((1 << 48) - 1))


def paint(luma: npt.NDArray[np.uint8], stamp: FrameStamp, layout: MarkerLayout) -> None:
    """Write the marker into the top rows of a luma plane (in place)."""
    b, per_row = layout.block, layout.per_row
    bits = np.zeros(layout.rows * per_row, dtype=np.uint8)
    bits[:BITS] = encode_bits(stamp).astype(np.uint8) * 255
    grid = bits.reshape(layout.rows, per_row)
    luma[: layout.height, : per_row * b] = np.repeat(np.repeat(grid, b, axis=0), b, axis=1)


@lru_cache(maxsize=16)
def _sample_points(layout: MarkerLayout) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    idx = np.arange(BITS)
    ys = (idx // layout.per_row) * layout.block + layout.block // 2
    xs = (idx % layout.per_row) * layout.block + layout.block // 2
    return ys, xs


def read(luma: npt.NDArray[np.uint8], layout: MarkerLayout) -> FrameStamp | None:
    """Read the marker from a (decoded) luma plane; None if absent or damaged."""
    ys, xs = _sample_points(layout)
    if luma.shape[0] < layout.height or luma.shape[1] < layout.per_row * layout.block:
        return None
    return decode_bits(luma[ys, xs] >= 128)


def unwrap_capture_us(capture_us: int, near_us: int) -> int:
    """The full µs time whose low 48 bits are ``capture_us``, closest to ``near_us``."""
    span = 1 << 48
    base = near_us - (near_us % span) + capture_us
    candidates = (base - span, base, base + span)
    return min(candidates, key=lambda t: abs(t - near_us))
