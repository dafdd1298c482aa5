"""Decoded pictures as 8-bit RGB for an SDR screen: an SDR picture through swscale, an HDR10 one (BT.2020 in PQ,
as the frame's own colour description says) through swscale to 16-bit R'G'B' and then the tone mapping of
:mod:`pyrofling.core.color`. On the decode thread; the window's, and anything else that shows pictures."""

from __future__ import annotations

import logging

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from pyrofling.core.color import AVCOL_SPC_BT2020_NCL, AVCOL_TRC_SMPTE2084, ToneMapper

log = logging.getLogger(__name__)


def is_hdr10_frame(frame: av.VideoFrame) -> bool:
    """The picture says it is PQ-coded (HDR10): its bitstream's colour description, not the stream's parameters,
    so a stream that turns HDR10 at a key frame is followed from that picture on."""
    return bool(frame.color_trc == AVCOL_TRC_SMPTE2084)


class ScreenPictures:
    """``rgb24(frame, width, height)``: the picture at that size as packed sRGB rows (``width * 3`` bytes each)."""

    def __init__(self) -> None:
        self._reformatter = VideoReformatter()  # kept: a new swscale context per frame costs ~1 ms
        self._tone: ToneMapper | None = None
        #: HDR10 pictures tone-mapped so far.
        self.tone_mapped = 0

    def rgb24(self, frame: av.VideoFrame, width: int, height: int) -> bytes:
        if not is_hdr10_frame(frame):
            return _packed(self._reformatter.reformat(frame, width=width, height=height, format="rgb24"), width * 3)
        return self.tone_map(self.pq48(frame, width, height), width, height)

    def pq48(self, frame: av.VideoFrame, width: int, height: int) -> bytes:
        """An HDR10 picture's R'G'B' PQ code values at that size, three little-endian u16 a pixel, rows top-down (for
        a shader that tone-maps, or :meth:`tone_map`)."""
        wide = self._reformatter.reformat(
            frame,
            width=width,
            height=height,
            format="rgb48le",
            src_colorspace=AVCOL_SPC_BT2020_NCL,
            src_color_range=frame.color_range or 2,  # unsaid: full range, as PyroFling's HDR10 profiles are
        )
        return _packed(wide, width * 6)

    def tone_map(self, pq48: bytes, width: int, height: int) -> bytes:
        """:meth:`pq48`'s pixels tone-mapped on the CPU to packed sRGB rows."""
        if self._tone is None:
            self._tone = ToneMapper()
            log.info("%s", self._tone.mapping.describe())
        self.tone_mapped += 1
        rgb16 = np.frombuffer(pq48, "<u2").reshape(height, width, 3)
        return self._tone.to_srgb8(rgb16).tobytes()


def _packed(frame: av.VideoFrame, row_bytes: int) -> bytes:
    """A packed picture's rows without their padding, in one copy."""
    plane = frame.planes[0]
    return bytes(plane) if plane.line_size == row_bytes else frame.to_ndarray().tobytes()
