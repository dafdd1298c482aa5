"""Video encoding through PyAV with the low-latency settings of the reference (PyroFling's `pyrofling.cpp`).

libx264 (default): ``tune=zerolatency``, no B-frames, ``intra-refresh=1``,
``forced-idr=1``, ``refs=1``, CBR-style VBV of about one frame, so a frame's
size stays close to bitrate/fps and no frame waits for another.  libx265 and
NVENC get their equivalents; libsvtav1 (AV1) its low-delay real-time mode, with
key frames in place of intra refresh.  The codec time base is µs, the wire's unit.

Runs in the host's encode thread (PyAV releases the GIL while encoding).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from fractions import Fraction

import av
import numpy as np
import numpy.typing as npt
from av.video.frame import PictureType
from av.video.reformatter import VideoReformatter

from pyrofling.core.bitstream import key_info
from pyrofling.core.color import AVCOL_PRI_BT2020, AVCOL_SPC_BT2020_NCL, AVCOL_TRC_SMPTE2084
from pyrofling.server.encoder_options import check_encoder_params, encoder_options
from pyrofling.wire import ColorProfile, VideoCodec

log = logging.getLogger(__name__)

US = Fraction(1, 1_000_000)
#: The presets x264 and x265 know, fastest first.
X26X_PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow")
#: SVT-AV1's presets, slowest first (an x264 name given to it means its real-time default, 12).
SVT_PRESETS = tuple(str(n) for n in range(14))


def default_encoder_threads() -> int:
    """One slice thread per CPU this process may use, at most 8. Measured at 720p60 with the host on 5 CPUs of
    its own: encode median 5.4 ms with 2 threads, 3.7 with 4, 2.3 with 8, and capture-to-decoded 10.0, 8.3 and
    6.6 ms, for the same host CPU; beyond 8 the slices get thin. On a 2-core machine: 2, as before."""
    affinity = getattr(os, "sched_getaffinity", None)  # Linux; elsewhere, every CPU
    cpus = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    return max(1, min(MAX_DEFAULT_THREADS, cpus))


#: The most slice threads the default takes.
MAX_DEFAULT_THREADS = 8


@dataclass(frozen=True, slots=True)
class EncoderConfig:
    """Video encoder settings (CLI: ``pyrofling host --encoder … --bitrate-kbits …``)."""

    encoder: str = "libx264"
    width: int = 1280
    height: int = 720
    fps: int = 60
    bitrate_kbits: int = 10_000
    #: x264/x265 preset; NVENC uses its own low-latency preset.
    preset: str = "ultrafast"
    ten_bit: bool = False
    #: HDR10: 10-bit BT.2020 PQ with its mastering metadata (the source's pictures are PQ code values already).
    hdr10: bool = False
    #: Encoder threads, each encoding a slice of the same frame (0 = codec default).
    threads: int = field(default_factory=default_encoder_threads)
    #: Intra-refresh period in seconds (the key-frame interval without intra refresh).
    refresh_s: float = 1.0
    #: VBV buffer in frames: ~1 keeps every frame near bitrate/fps.
    vbv_frames: float = 1.0
    #: The encoder's own options, ``key=value:key=value`` as x264's, x265's and SVT-AV1's ``-params`` take
    #: them, after the host's (so they win): e.g. ``min-cu-size=8:sao=1`` for x265 on flat game content.
    params: str = ""

    def check(self) -> None:
        """Raises ValueError saying what to change (before any encoder is opened)."""
        if self.encoder in ("libx264", "libx265") and self.preset not in X26X_PRESETS:
            raise ValueError(f"unknown preset {self.preset!r} for {self.encoder}: use one of {', '.join(X26X_PRESETS)}")
        if self.encoder == "libsvtav1" and self.preset not in X26X_PRESETS and self.preset not in SVT_PRESETS:
            raise ValueError(f"unknown preset {self.preset!r} for libsvtav1: use a number from 0 (slowest) to 13")
        if not self.refresh_s > 0:
            raise ValueError("the intra-refresh period (--refresh-s) must be more than 0 seconds")
        if self.width % 2 or self.height % 2:
            raise ValueError("width and height must be even for 4:2:0 video")
        if self.params:
            check_encoder_params(self.encoder, self.params)

    @property
    def video_codec(self) -> VideoCodec:
        name = self.encoder.lower()
        if "265" in name or "hevc" in name:
            return VideoCodec.H265
        if "av1" in name:
            return VideoCodec.AV1
        return VideoCodec.H264


@dataclass(frozen=True, slots=True)
class EncodedVideo:
    data: bytes
    pts_us: int
    key_frame: bool  # the key flag as libx264 sets it: IDR or intra-refresh recovery point
    idr: bool  # a whole picture on its own: a new viewer can start here
    encode_s: float
    convert_s: float


#: The encoder each codec is made with, in software and on an NVIDIA GPU (``host --codec``).
CODEC_ENCODERS = {
    VideoCodec.H264: ("libx264", "h264_nvenc"),
    VideoCodec.H265: ("libx265", "hevc_nvenc"),
    VideoCodec.AV1: ("libsvtav1", "av1_nvenc"),
}


def encoder_for(codec: VideoCodec, like: str = "libx264") -> str:
    """The encoder that makes ``codec``, on an NVIDIA GPU where ``like`` is an NVENC encoder."""
    software, nvenc = CODEC_ENCODERS[codec]
    return nvenc if "nvenc" in like else software


def available_encoders() -> list[str]:
    """The encoders of interest this PyAV build can open."""
    out = []
    for name in ("libx264", "libx265", "libsvtav1", "h264_nvenc", "hevc_nvenc", "av1_nvenc"):
        try:
            av.codec.Codec(name, "w")
        except (av.FFmpegError, ValueError):
            continue
        out.append(name)
    return out


class VideoEncoder:
    """``encode(planes, pts_us, force_keyframe=…) -> list[EncodedVideo]``; one instance per host."""

    def __init__(self, config: EncoderConfig) -> None:
        self.config = config
        config.check()
        self._ctx = self._open(config)
        self._last_pts: int | None = None
        #: Called with each picture after it was encoded, and owning it from then on (a second encoder).
        self.frame_tap: Callable[[av.VideoFrame, int], None] | None = None
        #: Called on the encode thread before an encoder is replaced by a new one (another rate, size, codec or
        #: colour), whose codec threads end with it: the host reads each thread's CPU here, so theirs is kept.
        self.before_reopen: Callable[[], object] | None = None
        # One converter kept for the stream: a frame's own reformat() sets up a new swscale context each call,
        # which cost 1 ms a 720p frame here (2.8 → 1.8 ms); this one is set up again only when the input changes.
        self._reformatter = VideoReformatter()
        self.frames = 0
        self.errors = 0
        #: The bitrate it encodes at now (rate control moves it; the configured one is the ceiling).
        self.bitrate_bps = config.bitrate_kbits * 1000
        #: The rate and ceiling it was made with: at fewer pictures a second (:meth:`set_fps`) each picture keeps
        #: the bits it had, the bitrate and the ceiling that share of these.
        self._full = (config.fps, config.bitrate_kbits)
        #: Times the stream changed size (:meth:`resize`) and codec (:meth:`switch`).
        self.resizes = 0
        self.switches = 0

    def resize(self, width: int, height: int) -> None:
        """Encode at this size from the next frame on: a new encoder, whose first frame is an IDR of the new size
        (a decoder takes the size from it). Nothing happens for the size it has. On the encode thread."""
        if (width, height) == (self.config.width, self.config.height):
            return
        self._reopen(replace(self.config, width=width, height=height))
        self.resizes += 1

    def switch(self, encoder: str) -> None:
        """Encode with ``encoder`` (another codec) from the next frame on, at the same size and bitrate: its first
        frame is a key frame. ValueError, and the old encoder goes on, when it does not open. On the encode
        thread."""
        if encoder == self.config.encoder:
            return
        config = replace(self.config, encoder=encoder)
        config.check()
        self._reopen(config)
        self.switches += 1

    def set_fps(self, fps: int) -> None:
        """Encode ``fps`` pictures a second from the next frame on: a new encoder at the same size, whose first
        frame is a key frame. Each picture keeps the bits it had at the full rate (half the pictures, half the
        bitrate and ceiling: the same time to encode, send and decode each, where the viewer that asked for fewer
        could not keep up). :attr:`bitrate_bps` stays the link's. On the encode thread."""
        if fps != self.config.fps:
            full_fps, full_kbits = self._full
            self._reopen(replace(self.config, fps=fps, bitrate_kbits=max(1, full_kbits * fps // full_fps)))

    def set_hdr10(self, hdr10: bool) -> None:
        """Encode HDR10 (or SDR) from the next frame on, as the source's pictures now are: a new encoder at the same
        size and bitrate, whose first frame is a key frame. On the encode thread."""
        if hdr10 == self.config.hdr10:
            return
        self._reopen(replace(self.config, hdr10=hdr10))
        log.info("encoding %s from now on", "HDR10 (10-bit BT.2020, PQ)" if hdr10 else "SDR")

    def _reopen(self, config: EncoderConfig) -> None:
        """A new encoder for ``config`` in place of this one (opened first: a failure leaves the old one going), at
        the bitrate rate control had it."""
        ctx = self._open(config)
        bitrate = self.bitrate_bps
        if self.before_reopen is not None:
            self.before_reopen()
        _end(self._ctx)
        self.config, self._ctx = config, ctx  # the old one is freed with its last reference
        self.set_bitrate(bitrate)

    @property
    def pix_fmt(self) -> str:
        return _pixel_format(self.config)

    def _open(self, cfg: EncoderConfig) -> av.VideoCodecContext:
        if cfg.encoder == "libsvtav1":  # SVT-AV1 prints a banner and notes on its own defaults at each start
            os.environ.setdefault("SVT_LOG", "1")  # errors only (SVT_LOG set by the person wins)
        try:
            ctx = av.CodecContext.create(cfg.encoder, "w")
        except (av.FFmpegError, ValueError) as exc:
            have = ", ".join(available_encoders()) or "none"
            raise ValueError(f"encoder {cfg.encoder!r} is not available in this PyAV build (have: {have})") from exc
        assert isinstance(ctx, av.VideoCodecContext)
        ctx.width, ctx.height = cfg.width, cfg.height
        ctx.pix_fmt = _pixel_format(cfg)
        ctx.time_base = US
        ctx.framerate = Fraction(cfg.fps, 1)
        bitrate = cfg.bitrate_kbits * 1000
        ctx.bit_rate = bitrate
        ctx.gop_size = max(1, round(cfg.refresh_s * cfg.fps))
        ctx.max_b_frames = 0
        if cfg.threads:
            ctx.thread_count = cfg.threads
        ctx.thread_type = "SLICE"  # frame threads add a frame of latency each
        # Full range, what CODEC_PARAMETERS announces: BT.709 (ColorProfile.BT709_FULL_CENTER), or for HDR10
        # BT.2020 with PQ (BT2020_PQ_FULL_CENTER), as PyroFling's server sends them.
        ctx.color_range = 2  # AVCOL_RANGE_JPEG
        if cfg.hdr10:
            ctx.colorspace, ctx.color_primaries, ctx.color_trc = (
                AVCOL_SPC_BT2020_NCL,
                AVCOL_PRI_BT2020,
                AVCOL_TRC_SMPTE2084,
            )
        else:  # AVCOL_SPC_BT709, AVCOL_PRI_BT709, AVCOL_TRC_BT709
            ctx.colorspace = ctx.color_primaries = ctx.color_trc = 1
        ctx.options = encoder_options(cfg)
        try:
            if cfg.params:
                _open_checking_params(ctx, cfg)
            else:
                ctx.open()
        except av.FFmpegError as exc:
            raise ValueError(_cannot_open(cfg, exc)) from None
        return ctx

    def set_bitrate(self, bits_per_s: int) -> None:
        """Encode at this average bitrate from the next frame on (libx264 reconfigures its rate control at once;
        the VBV's peak stays the configured ceiling's).  Safe from another thread between frames."""
        self.bitrate_bps = int(bits_per_s)
        self._ctx.bit_rate = self.bitrate_bps * self.config.fps // self._full[0]

    @property
    def video_codec(self) -> VideoCodec:
        return self.config.video_codec

    @property
    def color_profile(self) -> ColorProfile:
        """Full range, centre chroma, 4:2:0: BT.709, or BT.2020 with PQ for HDR10."""
        return ColorProfile.BT2020_PQ_FULL_CENTER_420 if self.config.hdr10 else ColorProfile.BT709_FULL_CENTER_420

    def encode_array(
        self,
        array: npt.NDArray[np.uint8],
        pts_us: int,
        *,
        pixel_format: str = "yuv420p",
        force_keyframe: bool = False,
    ) -> list[EncodedVideo]:
        """Encode one frame: yuv420p as ``(height * 3 // 2, width)`` or rgb24 as ``(height, width, 3)``."""
        t0 = time.perf_counter()
        if self.frame_tap is None and array.flags.c_contiguous:
            # Wrapped, not copied (0.3 ms a 720p frame on a slow core): x264 copies the picture in as it encodes,
            # so the caller may reuse the array after this returns.  A tap keeps the frame: it gets a copy.
            frame = av.VideoFrame.from_numpy_buffer(array, format=pixel_format)
        else:
            frame = av.VideoFrame.from_ndarray(array, format=pixel_format)
        if pixel_format == "yuv420p":
            frame.color_range = 2  # the scene renders full range
        if frame.format.name != self.pix_fmt:
            frame = self._convert(frame)
        return self.encode_frame(frame, pts_us, force_keyframe=force_keyframe, convert_s=time.perf_counter() - t0)

    def encode_shared(
        self,
        array: npt.NDArray[np.uint8],
        pts_us: int,
        *,
        pixel_format: str,
        force_keyframe: bool = False,
        on_read: Callable[[], None] | None = None,
        hdr10: bool = False,
    ) -> list[EncodedVideo]:
        """Encode packed RGB pixels in memory someone else owns (a game's shared image), without copying them.

        PyAV wraps the array as it is; the colour conversion (and scaling, if the
        image is not the stream's size) is the one pass that reads it, and then
        ``on_read`` says the memory may be reused, before the encoder itself runs.
        10-bit pixels (``x2bgr10le``, ``x2rgb10le``), which PyAV cannot wrap, are copied once into a frame first.
        ``hdr10``: the pixels are HDR10 (BT.2020, PQ); the stream follows them (:meth:`set_hdr10`).
        """
        t0 = time.perf_counter()
        self.set_hdr10(hdr10)
        try:
            if pixel_format in PACKED_10_BIT:
                frame = packed_frame(array, pixel_format)
            else:
                frame = av.VideoFrame.from_numpy_buffer(array, format=pixel_format)
            frame = self._convert(frame)
        finally:
            if on_read is not None:
                on_read()
        return self.encode_frame(frame, pts_us, force_keyframe=force_keyframe, convert_s=time.perf_counter() - t0)

    def encode_frame(
        self, frame: av.VideoFrame, pts_us: int, *, force_keyframe: bool = False, convert_s: float = 0.0
    ) -> list[EncodedVideo]:
        """Encode a PyAV frame (converted here if its format differs from the encoder's)."""
        t0 = time.perf_counter()
        if frame.format.name != self.pix_fmt or frame.width != self.config.width or frame.height != self.config.height:
            frame = self._convert(frame)
            convert_s += time.perf_counter() - t0
            t0 = time.perf_counter()
        # pts must increase strictly even if the clock stalls (as the reference does with --low-latency).
        if self._last_pts is not None and pts_us <= self._last_pts:
            pts_us = self._last_pts + 1
        self._last_pts = pts_us
        frame.pts = pts_us
        frame.time_base = US
        frame.pict_type = PictureType.I if force_keyframe else PictureType.NONE
        packets = self._ctx.encode(frame)
        encode_s = time.perf_counter() - t0
        self.frames += 1
        if self.frame_tap is not None:
            self.frame_tap(frame, pts_us)  # x264 has copied the picture: the frame is free to hand on
        return [self._wrap(p, encode_s, convert_s) for p in packets]

    def _convert(self, frame: av.VideoFrame) -> av.VideoFrame:
        """To the stream's size and pixel format, full range BT.709 (BT.2020 for HDR10): what CODEC_PARAMETERS
        announces. An HDR10 source's R'G'B' are PQ code values already: only the matrix changes."""
        return self._reformatter.reformat(
            frame,
            width=self.config.width,
            height=self.config.height,
            format=self.pix_fmt,
            dst_colorspace=AVCOL_SPC_BT2020_NCL if self.config.hdr10 else 1,
            dst_color_range=2,
        )

    def _wrap(self, packet: av.Packet, encode_s: float, convert_s: float) -> EncodedVideo:
        data = bytes(packet)
        key = bool(packet.is_keyframe)
        info = key_info(data, self.video_codec) if key else None
        pts = int(packet.pts) if packet.pts is not None else (self._last_pts or 0)
        return EncodedVideo(data, pts, key, bool(info and info.idr), encode_s, convert_s)

    def close(self) -> None:
        """The stream ends: an encoder that wants to be told (SVT-AV1 says so on stderr otherwise) is; what it
        still held is dropped.  On the encode thread or after it has stopped."""
        _end(self._ctx)

    def flush(self) -> list[EncodedVideo]:
        try:
            return [self._wrap(p, 0.0, 0.0) for p in self._ctx.encode(None)]
        except av.FFmpegError:
            return []


def _pixel_format(cfg: EncoderConfig) -> str:
    """The encoder's pixel format: 10-bit 4:2:0 for ``ten_bit`` and HDR10, else 8-bit."""
    if cfg.ten_bit or cfg.hdr10:
        return "p010le" if "nvenc" in cfg.encoder else "yuv420p10le"
    return "yuv420p"


#: Packed 10-bit RGB in a 32-bit word (a Vulkan swapchain's A2B10G10R10 and A2R10G10B10).
PACKED_10_BIT = frozenset({"x2bgr10le", "x2rgb10le"})


def packed_frame(array: npt.NDArray[np.uint8], pixel_format: str) -> av.VideoFrame:
    """A ``(height, width, 4)`` array of packed 10-bit pixels copied into a new frame (one pass)."""
    height, width = array.shape[:2]
    frame = av.VideoFrame(width, height, pixel_format)
    plane = frame.planes[0]
    rows = np.frombuffer(memoryview(plane), np.uint8).reshape(height, plane.line_size)
    rows[:, : width * 4] = array.reshape(height, width * 4)
    return frame


def _end(ctx: av.VideoCodecContext) -> None:
    if ctx.name == "libsvtav1":
        with contextlib.suppress(av.FFmpegError, ValueError):
            ctx.encode(None)


def _open_checking_params(ctx: av.VideoCodecContext, cfg: EncoderConfig) -> None:
    """Opens ``ctx``; ValueError naming the option if the encoder refused one of ``cfg.params`` (x264, x265 and
    SVT-AV1 only warn of an option they do not know, and go on without it)."""
    level = av.logging.get_level()
    if level is None or level < av.logging.WARNING:
        av.logging.set_level(av.logging.WARNING)
    try:
        with av.logging.Capture(local=True) as said:
            ctx.open()
    finally:
        av.logging.set_level(level)
    refused = [m.strip() for lvl, _, m in said if lvl <= av.logging.WARNING and ("option" in m.lower())]
    if refused:
        raise ValueError(f"{cfg.encoder} refused --encoder-params {cfg.params!r}: {refused[0]}")


def _cannot_open(cfg: EncoderConfig, exc: av.FFmpegError) -> str:
    """Why the encoder would not start, in words (FFmpeg's own message dumps every option)."""
    said = (exc.strerror or str(exc)).lower()
    if "nvenc" in cfg.encoder:
        return f"{cfg.encoder} did not start ({said}): it needs an NVIDIA GPU with its driver; use libx264 here"
    return (
        f"{cfg.encoder} did not start with these settings ({said}): check --preset, --ten-bit, --encoder-params "
        "and the size"
    )
