"""Host audio: sources (the test tone, a capture device) and the wire codecs (raw S16LE, Opus).

A source runs on a thread of its own and hands :class:`AudioChunk` s — ``chunk_ms`` of
interleaved float32 frames, stamped with the host's monotonic µs clock at the capture
of their first frame, the same clock as video pts — to a callback.  The host encodes
each chunk on that thread and sends it at once: audio is small, and any wait is
latency.

Raw S16LE (what the reference's `pyrofling.cpp` streams) is the default, for native viewers;
at 48 kHz stereo a 5 ms chunk is 960 bytes, one datagram, so one lost datagram costs
exactly 5 ms.  Opus (``--audio-codec opus``) runs in low-delay mode with 5 ms frames at
``opus_kbits`` (about 10× less bandwidth, 2.5 ms more delay).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

import av
import numpy as np

from pyrofling.core.audio_signal import ClickTone, Frames, to_s16le
from pyrofling.wire import AudioCodec

log = logging.getLogger(__name__)

AUDIO_SOURCES = ("tone", "device", "game", "desktop", "none")
AUDIO_CODECS = {"raw": AudioCodec.RAW_S16LE, "opus": AudioCodec.OPUS}
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
OPUS_FRAME_MS = (2.5, 5.0, 10.0, 20.0)


@dataclass(frozen=True, slots=True)
class AudioConfig:
    """Host audio settings (CLI: ``--audio``, ``--audio-rate``, ``--audio-codec`` …)."""

    #: "tone" (the test signal), "device" (a capture device through sounddevice), "game" (sent by the
    #: streamed game through the capture socket), "desktop" (the host's headless desktop's own sink) or "none".
    source: str = "tone"
    #: Capture device name or index for source "device" (None: the default input).
    device: str | None = None
    rate: int = 48_000
    channels: int = 2
    codec: str = "raw"
    #: Chunk (and Opus frame) length: 5 ms is one datagram of raw 48 kHz stereo.
    chunk_ms: float = 5.0
    opus_kbits: int = 128
    #: The test tone's clock runs this many ppm fast (negative: slow), to test the viewer's control.
    skew_ppm: float = 0.0
    #: Seconds between the test tone's clicks (on the host's clock).
    click_period_s: float = 1.0

    @property
    def enabled(self) -> bool:
        return self.source != "none"

    @property
    def chunk_frames(self) -> int:
        return max(1, round(self.rate * self.chunk_ms / 1000))

    def check(self) -> None:
        """Raises ValueError saying what to change."""
        if self.source not in AUDIO_SOURCES:
            raise ValueError(f"unknown audio source {self.source!r}: use {', '.join(AUDIO_SOURCES)}")
        if self.codec not in AUDIO_CODECS:
            raise ValueError(f"unknown audio codec {self.codec!r}: use {' or '.join(AUDIO_CODECS)}")
        if not 8000 <= self.rate <= 192_000:
            raise ValueError(f"audio rate {self.rate} Hz is out of range (8000 to 192000)")
        if self.channels not in (1, 2):
            raise ValueError("audio must be mono or stereo")
        if self.codec == "opus":
            if self.rate not in OPUS_RATES:
                raise ValueError(f"Opus needs a rate of {', '.join(map(str, OPUS_RATES))} Hz, not {self.rate}")
            if self.chunk_ms not in OPUS_FRAME_MS:
                raise ValueError(
                    f"Opus frames are {', '.join(f'{m:g}' for m in OPUS_FRAME_MS)} ms, not {self.chunk_ms:g}"
                )
        if self.codec == "raw" and self.chunk_frames * self.channels * 2 > 64 * 1024:
            raise ValueError(f"a {self.chunk_ms:g} ms raw chunk is too large; use a shorter --audio-chunk-ms")
        if abs(self.skew_ppm) > 5000:
            raise ValueError("--audio-skew-ppm must be within ±5000 (the viewer corrects at most ±0.5 %)")

    def describe(self, rate: int, codec: str) -> str:
        """What the host streams, in words, for its start-up line."""
        what = {"tone": "test tone", "game": "from the game"}.get(
            self.source, f"capture device {self.device or '(default)'}"
        )
        layout = "stereo" if self.channels == 2 else "mono"
        return f"{what}, {rate} Hz {layout}, {codec} in {self.chunk_ms:g} ms chunks"


@dataclass(frozen=True, slots=True)
class AudioChunk:
    frames: Frames  # (n, channels) float32
    pts_us: int  # host monotonic µs of the first frame's capture


@dataclass(frozen=True, slots=True)
class EncodedAudio:
    data: bytes
    pts_us: int


ChunkSink = Callable[[AudioChunk], None]


class AudioSource(Protocol):
    rate: int
    channels: int

    def start(self, sink: ChunkSink) -> None:
        """Start delivering chunks to ``sink`` from the source's own thread."""
        ...

    def close(self) -> None: ...


class ToneSource:
    """The test tone, produced in real time on the host's clock (optionally skewed)."""

    def __init__(self, config: AudioConfig) -> None:
        self.config = config
        self.rate = config.rate
        self.channels = config.channels
        self.tone = ClickTone(config.channels, click_period_s=config.click_period_s)
        self.actual_rate = config.rate * (1.0 + config.skew_ppm * 1e-6)
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, sink: ChunkSink) -> None:
        self._thread = threading.Thread(target=self._run, args=(sink,), name="pyrofling-audio-tone", daemon=True)
        self._thread.start()

    def _run(self, sink: ChunkSink) -> None:
        n = self.config.chunk_frames
        start_s = time.monotonic()
        produced = 0  # frames so far; the first frame of the next chunk is captured at start + produced/rate
        while not self._halt.is_set():
            first_s = start_s + produced / self.actual_rate
            ready_s = first_s + n / self.actual_rate  # a chunk exists once its last frame is captured
            delay = ready_s - time.monotonic()
            if delay > 0 and self._halt.wait(delay):
                return
            frames = self.tone.render(first_s, n, self.actual_rate)
            produced += n
            sink(AudioChunk(frames, round(first_s * 1_000_000)))

    def close(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(2.0)


class DeviceSource:
    """A capture device through sounddevice (PipeWire/Pulse monitor, JACK port, ALSA device).

    Uses PortAudio's blocking read on a thread of its own: the stream's internal ring
    does what a callback would, and a chunk's capture time is the stream time of the
    read minus what the read returned and the input latency.
    """

    def __init__(self, config: AudioConfig) -> None:
        import sounddevice as sd

        self.config = config
        self.channels = config.channels
        device: Any = config.device
        if isinstance(device, str) and device.isdigit():
            device = int(device)
        try:
            self._stream = sd.InputStream(
                device=device,
                samplerate=config.rate,
                channels=config.channels,
                dtype="float32",
                blocksize=config.chunk_frames,
                latency="low",
            )
        except (sd.PortAudioError, ValueError) as exc:
            raise ValueError(
                f"cannot open audio capture device {config.device or '(default)'} at {config.rate} Hz: {exc}; "
                "list devices with: python -m sounddevice"
            ) from exc
        self.rate = int(self._stream.samplerate)
        self.overflows = 0
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, sink: ChunkSink) -> None:
        self._stream.start()
        self._thread = threading.Thread(target=self._run, args=(sink,), name="pyrofling-audio-capture", daemon=True)
        self._thread.start()

    def _run(self, sink: ChunkSink) -> None:
        n = self.config.chunk_frames
        latency = float(self._stream.latency)
        while not self._halt.is_set():
            try:
                data, overflowed = self._stream.read(n)
            except Exception:  # the device went away: stop capturing, keep streaming video
                log.exception("audio capture failed; continuing without audio")
                return
            now = time.monotonic()
            if overflowed:
                self.overflows += 1
            first_s = now - latency - len(data) / self.rate
            sink(AudioChunk(np.ascontiguousarray(data, dtype=np.float32), round(first_s * 1_000_000)))

    def close(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(2.0)
        self._stream.close(ignore_errors=True)


class GameAudioSource:
    """Audio the streamed game sends through the capture socket, cut into chunks as it arrives.

    :meth:`feed` runs on the host's event loop; a chunk is stamped with the
    arrival time of its last frame minus its length (the game sends as it
    produces, so that is close to when it was made).
    """

    def __init__(self, config: AudioConfig) -> None:
        self.config = config
        self.rate = config.rate
        self.channels = config.channels
        self._sink: ChunkSink | None = None
        self._pending = np.zeros((0, config.channels), np.float32)
        self.refused_formats = 0

    def start(self, sink: ChunkSink) -> None:
        self._sink = sink

    def accepts(self, rate: int, channels: int) -> str | None:
        """Why a game's audio format cannot be streamed, or None."""
        if (rate, channels) != (self.rate, self.channels):
            self.refused_formats += 1
            layout = "stereo" if self.channels == 2 else "mono"
            return f"this host streams {self.rate} Hz {layout} audio; send that (got {rate} Hz, {channels} ch)"
        return None

    def feed(self, pcm: bytes) -> None:
        if self._sink is None:
            return
        samples = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0
        frames = np.concatenate([self._pending, samples.reshape(-1, self.channels)])
        n = self.config.chunk_frames
        now_us = time.monotonic() * 1_000_000
        whole = len(frames) // n
        for i in range(whole):
            chunk = frames[i * n : (i + 1) * n]
            first_us = now_us - (len(frames) - i * n) * 1_000_000 / self.rate
            self._sink(AudioChunk(np.ascontiguousarray(chunk), round(first_us)))
        self._pending = frames[whole * n :]

    def close(self) -> None:
        self._sink = None


def open_audio_source(config: AudioConfig) -> AudioSource | None:
    config.check()
    if config.source == "none":
        return None
    if config.source == "device":
        return DeviceSource(config)
    if config.source == "game":
        return GameAudioSource(config)
    if config.source == "desktop":  # the headless source opens it (sources.desktop_sound)
        raise ValueError("--audio desktop records the host's own desktop: it needs --source headless")
    return ToneSource(config)


class AudioEncoder:
    """``encode(chunk) -> list[EncodedAudio]``: raw S16LE packs each chunk; Opus encodes through PyAV."""

    def __init__(self, config: AudioConfig, rate: int) -> None:
        self.config = config
        self.rate = rate
        self.codec = AUDIO_CODECS[config.codec]
        self.errors = 0
        self._ctx: av.AudioCodecContext | None = None
        self._inputs: list[tuple[int, int]] = []  # (first sample index, pts µs) of chunks in the encoder
        self._samples = 0
        if self.codec == AudioCodec.OPUS:
            ctx = av.CodecContext.create("libopus", "w")
            assert isinstance(ctx, av.AudioCodecContext)
            ctx.sample_rate = rate
            ctx.layout = "stereo" if config.channels == 2 else "mono"
            ctx.format = "flt"
            ctx.bit_rate = config.opus_kbits * 1000
            ctx.time_base = Fraction(1, rate)
            ctx.options = {"application": "lowdelay", "frame_duration": f"{config.chunk_ms:g}", "vbr": "off"}
            ctx.open()
            self._ctx = ctx

    def encode(self, chunk: AudioChunk) -> list[EncodedAudio]:
        if self._ctx is None:
            return [EncodedAudio(to_s16le(chunk.frames), chunk.pts_us)]
        ctx = self._ctx
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(chunk.frames, dtype=np.float32).reshape(1, -1), format="flt", layout=ctx.layout
        )
        frame.sample_rate = self.rate
        frame.pts = self._samples
        frame.time_base = Fraction(1, self.rate)
        self._inputs.append((self._samples, chunk.pts_us))
        self._samples += len(chunk.frames)
        try:
            packets = ctx.encode(frame)
        except av.FFmpegError:
            self.errors += 1
            log.exception("Opus encode failed")
            return []
        return [EncodedAudio(bytes(p), self._pts_us(p.pts)) for p in packets]

    def _pts_us(self, sample: int | None) -> int:
        """The capture time of encoder sample ``sample``, from the chunk it came from."""
        if sample is None or not self._inputs:
            return self._inputs[-1][1] if self._inputs else 0
        while len(self._inputs) > 1 and self._inputs[1][0] <= sample:
            self._inputs.pop(0)
        first, pts = self._inputs[0]
        return pts + round((sample - first) * 1_000_000 / self.rate)
