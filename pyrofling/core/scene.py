"""The built-in test scene: colour bars, a scrolling checkerboard, film grain, a bouncing box, a frame counter.

Rendered straight into YUV 4:2:0 (BT.709, full range) planes with numpy, so a
1080p60 frame costs well under a millisecond of copying and no colour
conversion.  Every frame carries a :mod:`~pyrofling.core.frame_marker` band
with its id and capture time, which the viewer reads back after decoding.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pyrofling.core import frame_marker

# 75 % colour bars: white, yellow, cyan, green, magenta, red, blue (RGB 0..1).
BARS_RGB = [
    (0.75, 0.75, 0.75),
    (0.75, 0.75, 0),
    (0, 0.75, 0.75),
    (0, 0.75, 0),
    (0.75, 0, 0.75),
    (0.75, 0, 0),
    (0, 0, 0.75),
]

#: Distinct grain fields cycled through (prime, so the pattern never lines up with the motion).
GRAIN_FIELDS = 7

# 5×7 digit glyphs, one string per row.
_GLYPHS = {
    "0": ["01110", "10001", "10001", "10001", "10001", "10001", "01110"],
    "1": ["00100", "01100", "00100", "00100", "00100", "00100", "01110"],
    "2": ["01110", "10001", "00001", "00010", "00100", "01000", "11111"],
    "3": ["11110", "00001", "00001", "01110", "00001", "00001", "11110"],
    "4": ["00010", "00110", "01010", "10010", "11111", "00010", "00010"],
    "5": ["11111", "10000", "11110", "00001", "00001", "10001", "01110"],
    "6": ["00110", "01000", "10000", "11110", "10001", "10001", "01110"],
    "7": ["11111", "00001", "00010", "00100", "01000", "01000", "01000"],
    "8": ["01110", "10001", "10001", "01110", "10001", "10001", "01110"],
    "9": ["01110", "10001", "10001", "01111", "00001", "00010", "01100"],
}


def rgb_to_yuv709_full(r: float, g: float, b: float) -> tuple[int, int, int]:
    """BT.709 full-range Y'CbCr of an R'G'B' colour in 0..1, as 8-bit codes."""
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    cb = (b - y) / 1.8556
    cr = (r - y) / 1.5748
    return round(y * 255), round(128 + cb * 255), round(128 + cr * 255)


class TestScene:
    """Renders frame ``n`` of the scene as one ``(height * 3 // 2, width)`` yuv420p array."""

    __test__ = False  # not a pytest class

    def __init__(self, width: int, height: int) -> None:
        if width % 2 or height % 4 or width < 64 or height < 64:
            raise ValueError("the test scene needs an even width, a height divisible by 4, and at least 64×64")
        self.width, self.height = width, height
        self.marker = frame_marker.layout_for(width)
        self._background = self._render_background()
        # Drawn over in place: each frame first puts back from the background what the last one drew outside the
        # rows every frame redraws whole (the box's colour, the counter), not the whole picture (3 MB at 1080p).
        self._frame = self._background.copy()
        w, h = width, height
        self._y, self._u, self._v = _planes(self._frame, w, h)
        _, self._bg_u, self._bg_v = _planes(self._background, w, h)
        self._drawn: list[tuple[slice, slice]] = []  # chroma rows and columns the last frame's box coloured
        self._scale = max(2, height // 90)
        self._digits = {d: self._glyph(d) for d in _GLYPHS}
        # A checkerboard twice as wide as the frame: a moving window into it scrolls.
        self._checker_top = self.marker.height if self.marker else 0
        self._checker_h = max(8, (height // 4) // 2 * 2)
        cell = max(8, height // 18) // 2 * 2
        # Broadcast cell indices (a full mgrid cost a viewer checking the scene 16 ms at its first picture).
        rows = (np.arange(self._checker_h) // cell)[:, None]
        cols = (np.arange(2 * width) // cell)[None, :]
        self._checker = np.where((rows + cols) % 2 == 0, np.uint8(200), np.uint8(40))
        self._cell = cell
        # Film grain over the middle band: a few precomputed fields cycled, so every frame has detail the
        # encoder cannot predict from the last one (like a real game) at the cost of one copy.
        grain_top = self._checker_top + self._checker_h
        self._grain_rows = (grain_top, h // 2)
        rng = np.random.default_rng(1)
        base = self._background[grain_top : h // 2].astype(np.int16)
        self._grain = [
            np.clip(base + rng.integers(-24, 25, size=base.shape, dtype=np.int16) + 40, 0, 255).astype(np.uint8)
            for _ in range(GRAIN_FIELDS)
        ]

    def structured_rows(self) -> list[tuple[int, int]]:
        """Row ranges without film grain, the frame marker or the frame counter: what an encoder reproduces
        closely when it decodes cleanly (grain is noise by design; the counter's digits change every frame and
        a starved encoder blurs them; benches compare pictures here)."""
        top = self.marker.height if self.marker else 0
        g0, g1 = self._grain_rows
        counter_top = (self.height - 9 * self._scale) // 8 * 8
        return [(top, g0), (g1, counter_top)]

    def _render_background(self) -> npt.NDArray[np.uint8]:
        w, h = self.width, self.height
        frame = np.empty((h * 3 // 2, w), dtype=np.uint8)
        y = frame[:h]
        u = frame[h : h + h // 4].reshape(h // 2, w // 2)
        v = frame[h + h // 4 :].reshape(h // 2, w // 2)
        y[:] = 16
        u[:] = 128
        v[:] = 128
        bar_w = -(-w // len(BARS_RGB))
        for i, rgb in enumerate(BARS_RGB):
            cy, cb, cr = rgb_to_yuv709_full(*rgb)
            x0, x1 = i * bar_w, min(w, (i + 1) * bar_w)
            y[h // 2 :, x0:x1] = cy
            u[h // 4 :, x0 // 2 : (x1 + 1) // 2] = cb
            v[h // 4 :, x0 // 2 : (x1 + 1) // 2] = cr
        return frame

    def _glyph(self, digit: str) -> npt.NDArray[np.uint8]:
        rows = np.array([[int(c) for c in row] for row in _GLYPHS[digit]], dtype=np.uint8) * 235
        return np.repeat(np.repeat(rows, self._scale, axis=0), self._scale, axis=1)

    def render(self, index: int, capture_us: int) -> npt.NDArray[np.uint8]:
        """Frame ``index``; the returned array is reused by the next call (copy it if you keep it)."""
        w, h = self.width, self.height
        for rows, cols in self._drawn:
            self._u[rows, cols] = self._bg_u[rows, cols]
            self._v[rows, cols] = self._bg_v[rows, cols]
        y = self._y
        # Scrolling checkerboard, two cells per second at 60 fps.
        top, ch = self._checker_top, self._checker_h
        shift = (index * self._cell // 30) % w
        y[top : top + ch] = self._checker[:, shift : shift + w]
        g0, g1 = self._grain_rows
        y[g0:g1] = self._grain[index % GRAIN_FIELDS]
        # A box bouncing across the middle band.
        box = max(16, h // 8) // 2 * 2
        span_x, span_y = w - box, max(1, h // 2 - (top + ch) - box)
        bx = _bounce(index * max(2, w // 240), span_x) // 2 * 2
        by = (top + ch + _bounce(index * max(1, h // 240), span_y)) // 2 * 2
        y[by : by + box, bx : bx + box] = 235  # within the grain's rows: the next frame's grain covers it
        chroma = (slice(by // 2, (by + box) // 2), slice(bx // 2, (bx + box) // 2))
        self._u[chroma] = 90
        self._v[chroma] = 200
        self._drawn = [chroma]
        # The frame counter, bottom left, over the bars (drawn over the background: put back first).
        x = 2 * self._scale
        gy = h - 9 * self._scale
        counter = (slice(gy, gy + 7 * self._scale), slice(x, w))
        y[counter] = self._background[:h][counter]
        for ch_ in f"{index:06d}":
            g = self._digits[ch_]
            if x + g.shape[1] > w:  # a picture too narrow for the whole counter shows what fits
                break
            y[gy : gy + g.shape[0], x : x + g.shape[1]] = np.maximum(
                y[gy : gy + g.shape[0], x : x + g.shape[1]] // 3, g
            )
            x += g.shape[1] + self._scale
        if self.marker is not None:
            frame_marker.paint(y, frame_marker.FrameStamp(index & 0xFFFFFFFF, capture_us), self.marker)
            self._u[: self.marker.height // 2] = 128
            self._v[: self.marker.height // 2] = 128
        return self._frame


def _planes(frame: npt.NDArray[np.uint8], w: int, h: int) -> tuple[npt.NDArray[np.uint8], ...]:
    """The Y, U and V planes of a ``(h * 3 // 2, w)`` yuv420p array, as views."""
    return frame[:h], frame[h : h + h // 4].reshape(h // 2, w // 2), frame[h + h // 4 :].reshape(h // 2, w // 2)


def _bounce(position: int, span: int) -> int:
    """A triangle wave 0..span..0 over ``position``."""
    if span <= 0:
        return 0
    p = position % (2 * span)
    return p if p <= span else 2 * span - p
