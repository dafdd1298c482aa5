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

    @property
    def tone_mapping(self) -> str | None:
        """What was done to HDR10 pictures, in words (None: none came)."""
        return self._tone.mapping.describe() if self._tone is not None and self.tone_mapped else None

    def rgb24(self, frame: av.VideoFrame, width: int, height: int) -> bytes:
        if not is_hdr10_frame(frame):
            rgb = self._reformatter.reformat(frame, width=width, height=height, format="rgb24")
            plane = rgb.planes[0]
            return bytes(plane) if plane.line_size == width * 3 else rgb.to_ndarray().tobytes()  # one copy
        if self._tone is None:
            self._tone = ToneMapper()
            log.info("%s", self._tone.mapping.describe())
        wide = self._reformatter.reformat(
            frame,
            width=width,
            height=height,
            format="rgb48le",
            src_colorspace=AVCOL_SPC_BT2020_NCL,
            src_color_range=frame.color_range or 2,  # unsaid: full range, as PyroFling's HDR10 profiles are
        )
        self.tone_mapped += 1
        rgb16 = np.asarray(wide.to_ndarray(), np.uint16)  # (height, width, 3), no copy
        return self._tone.to_srgb8(rgb16).tobytes()
