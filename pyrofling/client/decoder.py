"""Video decoding through PyAV, tuned for latency: slice threads, low-delay, corrupt output allowed.

Runs in the viewer's decode thread.  Errors on network data are caught and
counted; the caller asks for a key frame (conventions §12).
"""

from __future__ import annotations

import logging

import av
from av.codec.context import Flags

from pyrofling.wire import VideoCodec

log = logging.getLogger(__name__)

DECODERS = {VideoCodec.H264: "h264", VideoCodec.H265: "hevc", VideoCodec.AV1: "libdav1d"}


class DecodeError(Exception):
    """The decoder refused a packet; ask for a key frame."""


class VideoDecoder:
    """``decode(data, pts_us) -> list[av.VideoFrame]``; frames come out as soon as they are whole."""

    def __init__(self, codec: VideoCodec, *, threads: int = 2) -> None:
        name = DECODERS.get(codec)
        if name is None:
            raise ValueError(f"no decoder for video codec {codec!r}")
        ctx = av.CodecContext.create(name, "r")
        assert isinstance(ctx, av.VideoCodecContext)
        ctx.thread_type = "SLICE"  # frame threading would hold frames back, one per thread
        ctx.thread_count = threads
        # OUTPUT_CORRUPT: show something rather than nothing (the gate decides what is shown);
        # LOW_DELAY: no reordering delay, there are no B-frames.
        ctx.flags = Flags.output_corrupt | Flags.low_delay
        ctx.open()
        self.codec = codec
        self._ctx = ctx
        self.errors = 0

    def decode(self, data: bytes, pts_us: int) -> list[av.VideoFrame]:
        packet = av.Packet(data)
        packet.pts = pts_us
        try:
            frames = self._ctx.decode(packet)
        except av.FFmpegError as exc:
            self.errors += 1
            raise DecodeError(str(exc)) from exc
        return [f for f in frames if isinstance(f, av.VideoFrame)]
