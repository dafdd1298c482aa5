"""The viewer's decoders (PyAV): video tuned for latency, audio as the host sends it (raw S16LE or Opus).

Each runs on its own thread (video on the decode thread, audio on the player's).
Errors on network data come out as :class:`DecodeError`: the caller counts it and
asks for a key frame (video) or conceals the packet (audio).
"""

from __future__ import annotations

import logging
import os

import av
import numpy as np
import numpy.typing as npt
from av.codec.context import Flags, Flags2

from pyrofling.core.audio_signal import Frames, from_s16le
from pyrofling.wire import AudioCodec, VideoCodec

log = logging.getLogger(__name__)

DECODERS = {VideoCodec.H264: "h264", VideoCodec.H265: "hevc", VideoCodec.AV1: "libdav1d"}

#: The most slice threads the default decode takes (see :func:`default_decode_threads`).
MAX_DEFAULT_DECODE_THREADS = 8


def default_decode_threads() -> int:
    """One slice thread per CPU this process may use, at most :data:`MAX_DEFAULT_DECODE_THREADS` (a host's
    default encode has a slice per CPU, up to 8, so the slices are there to share).  Measured on a 16-CPU machine
    (the viewer on 7 CPUs), the test scene at 20 Mbit/s, a picture's decode median with 1, 2, 3, 4 and 6 threads:
    1080p 2.74, 1.97, 1.97, 1.71, 1.58 ms; 720p 1.37 ms with 2 and with 4.  Later, 1080p60 in the viewer taking
    turns, 4 against 7 threads: 1.69 and 1.73 ms against 1.54 and 1.50, its FFmpeg threads' CPU the same (13-14 %
    of a core): a thread with no slice to decode costs nothing.  On the 2-core machine 2, and 1 for a viewer held to
    one CPU (a second thread there only takes turns)."""
    affinity = getattr(os, "sched_getaffinity", None)  # Linux; elsewhere, every CPU
    cpus = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    return max(1, min(MAX_DEFAULT_DECODE_THREADS, cpus))


def decodable_codecs() -> frozenset[VideoCodec]:
    """The video codecs this PyAV build decodes (what a viewer tells a host that chooses, protocol.md §7.15)."""
    found = set()
    for codec, name in DECODERS.items():
        try:
            av.codec.Codec(name, "r")
        except (av.FFmpegError, ValueError):
            continue
        found.add(codec)
    return frozenset(found)


def luma(frame: av.VideoFrame) -> npt.NDArray[np.uint8]:
    """A decoded picture's luma plane as 8-bit rows of its line size (an 8-bit one without a copy: the row padding is
    kept; a 10-bit one's top 8 bits)."""
    plane = frame.planes[0]
    if frame.format.name.endswith("10le"):
        words = np.frombuffer(memoryview(plane), "<u2").reshape(frame.height, plane.line_size // 2)
        return (words >> 2).astype(np.uint8)
    return np.frombuffer(memoryview(plane), np.uint8).reshape(frame.height, plane.line_size)


def accepts_parts(codec: VideoCodec, threads: int) -> bool:
    """Whether the decoder can take a picture in parts (:class:`~pyrofling.core.viewer.connection.DecodeVideoPart`):
    FFmpeg's H.264 decoder does (``flags2 chunks``), with two slice threads or more: on one thread each part
    costs it about as long as the rest of the picture (28 ms a 1080p part, measured with FFmpeg 8)."""
    return codec == VideoCodec.H264 and threads >= 2


class DecodeError(Exception):
    """A decoder refused a packet from the network."""


class VideoDecoder:
    """``decode(data, pts_us) -> list[av.VideoFrame]``: slice threads, low delay, corrupt output allowed."""

    def __init__(self, codec: VideoCodec, *, threads: int = 2, parts: bool = False) -> None:
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
        #: Takes a picture in parts, whole NAL units at a time (:meth:`decode` gives it once its last slice is in).
        self.parts = parts and accepts_parts(codec, threads)
        if self.parts:
            ctx.flags2 = Flags2.chunks
        ctx.open()
        self.codec = codec
        self._ctx = ctx
        self.errors = 0

    def flush(self) -> None:
        """Drop what the decoder holds: a picture begun and never finished, and its references."""
        self._ctx.flush_buffers()

    def decode(self, data: bytes, pts_us: int) -> list[av.VideoFrame]:
        packet = av.Packet(data)
        packet.pts = pts_us
        try:
            frames = self._ctx.decode(packet)
        except av.FFmpegError as exc:
            self.errors += 1
            raise DecodeError(str(exc)) from exc
        return [f for f in frames if isinstance(f, av.VideoFrame)]


class AudioDecoder:
    """``decode(data) -> (frames, channels) float32`` for raw S16LE or Opus."""

    def __init__(self, codec: AudioCodec, rate: int, channels: int) -> None:
        if codec not in (AudioCodec.RAW_S16LE, AudioCodec.OPUS):
            raise ValueError(f"audio codec {codec.name} is not supported (raw S16LE and Opus are)")
        self.codec = codec
        self.rate = rate
        self.channels = channels
        self._ctx: av.AudioCodecContext | None = None
        if codec == AudioCodec.OPUS:
            ctx = av.CodecContext.create("opus", "r")
            assert isinstance(ctx, av.AudioCodecContext)
            ctx.sample_rate = rate
            ctx.layout = "stereo" if channels == 2 else "mono"
            ctx.open()
            self._ctx = ctx

    def decode(self, data: bytes) -> Frames:
        if self._ctx is None:
            try:
                return from_s16le(data, self.channels)
            except ValueError as exc:
                raise DecodeError(str(exc)) from exc
        try:
            frames = self._ctx.decode(av.Packet(data))
        except av.FFmpegError as exc:
            raise DecodeError(str(exc)) from exc
        parts = []
        for f in frames:
            a = f.to_ndarray()
            parts.append(a.T if f.format.is_planar else a.reshape(-1, self.channels))
        if not parts:
            return np.zeros((0, self.channels), dtype=np.float32)
        return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)
