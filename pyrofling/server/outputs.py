"""Recording and broadcasting: the host's stream muxed into a local file or sent to an RTMP server.

Both take the packets the host already encoded for its viewers, with no second
encode. A recording also takes the audio packets as they go on the wire (raw
PCM or Opus, both fine in Matroska); RTMP carries only AAC, so the broadcast
encodes AAC from the captured audio. Asked to (``--broadcast-bitrate-kbits``),
the broadcast runs its own H.264 encoder on the same pictures: a normal GOP
and a lower bitrate suit a CDN better than the viewers' intra refresh.

Each output is a thread with a bounded queue. The host pushes a packet after
it has gone to the direct viewers, and a push never waits. An output that
falls behind (a slow disk, a stalled server) drops packets and starts again
at the next key frame. Nothing an output does can delay a viewer.

A recording writes a Matroska cluster at least once a second and flushes
each one to the file. A crash loses at most the last second, and a clean
stop (Ctrl-C, SIGTERM) writes the index too. A broadcast that loses its
server reconnects with exponential backoff (:class:`~pyrofling.core.outputs.Backoff`).
"""

from __future__ import annotations

import io
import logging
import re
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import numpy.typing as npt
from av.video.frame import PictureType

from pyrofling.core.bitstream import KeyGate, KeyInfo
from pyrofling.core.outputs import Backoff, StreamClock
from pyrofling.files import unwritable
from pyrofling.server.audio import AudioChunk, EncodedAudio
from pyrofling.server.encoder import EncodedVideo
from pyrofling.wire import AudioCodec, VideoCodec

log = logging.getLogger(__name__)

US = Fraction(1, 1_000_000)
#: Elementary stream formats that read a codec's parameters from its own key frame.
_RAW_FORMATS = {VideoCodec.H264: "h264", VideoCodec.H265: "hevc"}
#: How much an output may fall behind before it drops: about 4 s of a 60 fps stream with 5 ms audio.
QUEUE_ITEMS = 1200
#: Raw pictures waiting for the broadcast's own encoder (each is a whole frame of memory).
QUEUE_FRAMES = 6
#: How often an output's thread wakes to write what was pushed.
POLL_S = 0.02
AAC_FRAME = 1024  # samples per AAC-LC frame


@dataclass(frozen=True, slots=True)
class OutputConfig:
    """``pyrofling host --record … --broadcast …``."""

    #: A Matroska file to record to (None: no recording).
    record: Path | None = None
    #: An rtmp:// or rtmps:// URL, stream key included (None: no broadcast).
    broadcast: str | None = None
    #: Give the broadcast its own H.264 encoder at this bitrate (None: send the viewers' packets).
    broadcast_bitrate_kbits: int | None = None
    #: Key frame interval of the broadcast's own encoder, seconds.
    broadcast_keyint_s: float = 2.0
    #: AAC bitrate of the broadcast's audio.
    broadcast_audio_kbits: int = 160
    #: Longest wait between reconnection attempts, seconds.
    retry_max_s: float = 15.0

    @property
    def enabled(self) -> bool:
        return self.record is not None or self.broadcast is not None

    def check(self) -> None:
        """Raises ValueError saying what to change."""
        if self.record is not None:
            path = self.record
            if path.suffix.lower() not in (".mkv", ".mka"):
                raise ValueError(f"--record writes Matroska: name the file .mkv (got {str(path)!r})")
            if path.exists() and not path.is_dir():
                raise ValueError(f"--record {str(path)!r} already exists: choose another name or delete it first")
            problem = unwritable(path)
            if problem:
                raise ValueError(f"--record {problem}")
        if self.broadcast is not None and not re.match(r"^rtmps?://[^/]+/.+", self.broadcast):
            raise ValueError(
                "--broadcast takes an RTMP ingest URL with its stream key, e.g. rtmp://live.example.com/app/KEY "
                "(rtmp:// or rtmps://)"
            )
        if self.broadcast_bitrate_kbits is not None and self.broadcast_bitrate_kbits <= 0:
            raise ValueError("--broadcast-bitrate-kbits must be positive")
        if self.broadcast_keyint_s <= 0:
            raise ValueError("--broadcast-keyint must be positive")
        if self.broadcast_bitrate_kbits is not None and self.broadcast is None:
            raise ValueError("--broadcast-bitrate-kbits applies to --broadcast")
        if self.broadcast_keyint_s != 2.0 and self.broadcast_bitrate_kbits is None:
            raise ValueError(
                "--broadcast-keyint sets the broadcast's own encoder: add --broadcast-bitrate-kbits "
                "(without it the broadcast carries the viewers' intra-refresh stream)"
            )


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """What the outputs need to know about the host's stream to set up their containers."""

    width: int
    height: int
    fps: int
    video_codec: VideoCodec
    preset: str = "ultrafast"
    audio_codec: AudioCodec = AudioCodec.NONE
    audio_rate: int = 0
    audio_channels: int = 0

    @property
    def layout(self) -> str:
        return "stereo" if self.audio_channels == 2 else "mono"


def redact_url(url: str) -> str:
    """An RTMP URL fit for a log: the stream key (everything after the application) hidden."""
    m = re.match(r"^(rtmps?://[^/]+/[^/?]+)", url)
    return f"{m.group(1)}/…" if m else "(broadcast URL)"


@dataclass(slots=True)
class OutputStats:
    kind: str
    target: str
    state: str = "waiting for a key frame"
    video_packets: int = 0
    audio_packets: int = 0
    bytes_written: int = 0
    #: Packets dropped because the output fell behind (its queue was full).
    dropped: int = 0
    #: Packets passed over while waiting for a key frame or for the next reconnection.
    skipped: int = 0
    connects: int = 0
    failures: int = 0
    last_error: str | None = None
    #: Container time of the last video packet written, seconds.
    seconds: float = 0.0
    #: CPU time of the output's thread (muxing, writing, the broadcast's AAC and own encoder), seconds.
    cpu_s: float = 0.0


class MediaOutput:
    """A muxing thread behind a bounded queue; subclasses say what goes into which container."""

    kind = "output"
    #: Whether it takes the encoded video packets or (own encoder) the pictures.
    wants_packets = True
    #: Which audio it takes: the packets as they go on the wire, or the captured samples (to encode itself).
    audio_input = "packets"

    def __init__(self, target: str, info: StreamInfo) -> None:
        self.info = info
        self.stats = OutputStats(self.kind, target)
        # Plain deques and a thread that wakes every POLL_S: a push is one append, with no lock or
        # wake-up for the host's threads to pay for.
        self._items: deque[tuple[Any, ...]] = deque()
        self._frames: deque[tuple[av.VideoFrame, int]] = deque()
        self._lost = False
        self._stopping = threading.Event()
        self._container: av.container.OutputContainer | None = None
        self._video: av.video.stream.VideoStream | None = None
        self._audio: av.audio.stream.AudioStream | None = None
        self._clock = StreamClock()
        self._gate = KeyGate()
        self._thread = threading.Thread(target=self._run, name=f"pyrofling-{self.kind}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # -- the host's side: never blocks ---------------------------------------------------------

    def push(self, item: tuple[Any, ...]) -> None:
        if len(self._items) >= QUEUE_ITEMS:
            self.stats.dropped += 1
            self._lost = True  # the thread resynchronises at the next key frame
            return
        self._items.append(item)

    def push_frame(self, frame: av.VideoFrame, pts_us: int) -> None:
        if len(self._frames) >= QUEUE_FRAMES:
            self.stats.dropped += 1
            return
        self._frames.append((frame, pts_us))

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what is queued, finish the container (flush, index) and stop the thread."""
        self._stopping.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("%s %s: not finished after %g s (a stalled server?)", self.kind, self.stats.target, timeout_s)

    # -- the output's thread -------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                stopping = self._stopping.wait(POLL_S)
                self._drain()
                self.stats.cpu_s = time.thread_time()
                if stopping:
                    break
        finally:
            self._finish()

    def _drain(self) -> None:
        while self._frames or self._items:
            while self._frames:
                frame, pts_us = self._frames.popleft()
                self._safely(self._on_frame, frame, pts_us)
            while self._items:
                item = self._items.popleft()
                if self._lost:
                    self._lost = False
                    self._gate.lost()
                self._safely(self._handle, item)
        self._safely(self._drained)

    def _safely(self, step: Any, *args: Any) -> None:
        try:
            step(*args)
        except (av.FFmpegError, OSError, ValueError) as exc:
            self._failed(exc)

    def _drained(self) -> None:
        """After each batch: write what was held back to be written together."""

    def _handle(self, item: tuple[Any, ...]) -> None:
        kind = item[0]
        if kind == "video":
            self._on_video(item[1])
        elif kind == "audio":
            self._on_audio_packet(item[1])
        elif kind == "pcm":
            self._on_pcm(item[1])

    def _on_video(self, packet: EncodedVideo) -> None:
        if not self._gate.packet(KeyInfo(idr=packet.idr, recovery_frames=0) if packet.key_frame else None):
            self.stats.skipped += 1
            return
        if self._container is None:
            if not self._ready_to_open():
                self._gate.lost()
                self.stats.skipped += 1
                return
            self._open(template=packet)
        assert self._video is not None
        t = self._clock.stamp("video", packet.pts_us)
        if t is None:
            return
        out = av.Packet(packet.data)
        out.stream = self._video
        out.time_base = US
        out.pts = out.dts = t
        out.is_keyframe = packet.key_frame
        self._mux(out, video=True)
        self.stats.seconds = t / 1e6

    def _on_audio_packet(self, packet: EncodedAudio) -> None:
        pass

    def _on_pcm(self, chunk: AudioChunk) -> None:
        pass

    def _on_frame(self, frame: av.VideoFrame, pts_us: int) -> None:
        pass

    def _ready_to_open(self) -> bool:
        return True

    def _open(self, template: EncodedVideo | None, pts_us: int | None = None) -> None:
        raise NotImplementedError

    def _mux(self, packet: av.Packet, *, video: bool) -> None:
        assert self._container is not None
        size = packet.size
        self._container.mux(packet)
        self.stats.bytes_written += size
        if video:
            self.stats.video_packets += 1
        else:
            self.stats.audio_packets += 1
        self._muxed()

    def _muxed(self) -> None:
        pass

    def _failed(self, exc: Exception) -> None:
        self.stats.failures += 1
        self.stats.last_error = str(exc)
        log.error("%s %s failed: %s", self.kind, self.stats.target, exc)

    def _finish(self) -> None:
        self._close_container()

    def _close_container(self) -> None:
        container, self._container = self._container, None
        self._video = self._audio = None
        if container is not None:
            try:
                container.close()
            except (av.FFmpegError, OSError) as exc:
                log.warning("%s %s: closing failed: %s", self.kind, self.stats.target, exc)

    def _video_stream_from(self, container: av.container.OutputContainer, packet: EncodedVideo) -> None:
        """A stream set up from the key frame's own parameter sets (SPS/PPS), with no encoder opened."""
        fmt = _RAW_FORMATS.get(self.info.video_codec)
        if fmt is None:
            raise ValueError(f"cannot mux {self.info.video_codec.name} video")
        with av.open(io.BytesIO(packet.data), format=fmt) as parsed:
            stream = container.add_stream_from_template(parsed.streams.video[0])
        stream.time_base = Fraction(1, 1000)
        self._video = stream

    def summary(self) -> dict[str, Any]:
        return asdict(self.stats)


class Recorder(MediaOutput):
    """``--record FILE.mkv``: the viewers' video and audio packets in a Matroska file."""

    kind = "recording"

    def __init__(self, path: Path, info: StreamInfo) -> None:
        super().__init__(str(path), info)
        self.path = path
        self._pcm: list[EncodedAudio] = []
        if info.video_codec not in _RAW_FORMATS:
            raise ValueError(f"--record: {info.video_codec.name} video cannot be recorded yet (use H.264 or H.265)")

    def _open(self, template: EncodedVideo | None, pts_us: int | None = None) -> None:
        assert template is not None
        container = av.open(
            str(self.path),
            "w",
            format="matroska",
            # A cluster at least every second, each flushed to the file as it closes: a crash loses ≤ 1 s.
            container_options={"cluster_time_limit": "1000", "flush_packets": "1"},
        )
        try:
            self._video_stream_from(container, template)
            info = self.info
            if info.audio_codec == AudioCodec.RAW_S16LE:
                self._audio = container.add_stream("pcm_s16le", rate=info.audio_rate, layout=info.layout)
            elif info.audio_codec == AudioCodec.OPUS:
                self._audio = container.add_stream("libopus", rate=info.audio_rate, layout=info.layout)
        except BaseException:
            container.close()
            raise
        self._container = container
        self._clock.start(template.pts_us)
        self.stats.state = "recording"
        log.info("recording to %s", self.path)

    def _on_audio_packet(self, packet: EncodedAudio) -> None:
        if self._audio is None:
            return
        if self.info.audio_codec == AudioCodec.RAW_S16LE:
            self._pcm.append(packet)  # 5 ms chunks: written together, a few per packet
        else:
            self._mux_audio(packet.data, packet.pts_us)

    def _drained(self) -> None:
        pcm, self._pcm = self._pcm, []
        if pcm and self._audio is not None:
            self._mux_audio(b"".join(p.data for p in pcm), pcm[0].pts_us)

    def _mux_audio(self, data: bytes, pts_us: int) -> None:
        assert self._audio is not None
        t = self._clock.stamp("audio", pts_us)
        if t is None:
            return
        out = av.Packet(data)
        out.stream = self._audio
        out.time_base = US
        out.pts = out.dts = t
        self._mux(out, video=False)

    def _failed(self, exc: Exception) -> None:
        super()._failed(exc)
        self.stats.state = "failed"
        self._close_container()  # keep what was written; nothing more goes in
        self._gate.stop()

    def _finish(self) -> None:
        had = self._container is not None
        super()._finish()
        if had:
            log.info("recording %s closed: %.1f s of video", self.path, self.stats.seconds)
            self.stats.state = "finished"
        elif self.stats.state != "failed":
            log.warning("recording %s: no video arrived, nothing was written", self.path)


class Broadcaster(MediaOutput):
    """``--broadcast rtmp://…``: FLV with H.264 and AAC to an RTMP ingest, reconnecting when it goes away."""

    kind = "broadcast"
    audio_input = "pcm"  # RTMP carries AAC: encoded here from the captured audio

    def __init__(self, url: str, info: StreamInfo, config: OutputConfig) -> None:
        super().__init__(redact_url(url), info)
        self.url = url
        self.config = config
        self.own_encoder = config.broadcast_bitrate_kbits is not None
        self.wants_packets = not self.own_encoder
        if not self.own_encoder and info.video_codec != VideoCodec.H264:
            raise ValueError(
                f"--broadcast: RTMP carries H.264, the stream is {info.video_codec.name}; add "
                "--broadcast-bitrate-kbits N to give the broadcast its own H.264 encoder"
            )
        self._backoff = Backoff(max_s=config.retry_max_s)
        self._retry_at = 0.0
        self._up_since: float | None = None
        self._connected = False
        self._audio_next: int | None = None  # next AAC frame's pts, in samples
        self._pcm_parts: list[npt.NDArray[np.float32]] = []  # captured audio not yet a whole AAC frame
        self._pcm_held = 0
        self._force_key = False

    def _ready_to_open(self) -> bool:
        return time.monotonic() >= self._retry_at

    def _open(self, template: EncodedVideo | None, pts_us: int | None = None) -> None:
        info = self.info
        self.stats.state = "connecting"
        container = av.open(self.url, "w", format="flv")
        try:
            if template is not None:
                self._video_stream_from(container, template)
            else:
                self._video = self._own_video_stream(container)
            if info.audio_codec != AudioCodec.NONE:
                audio = container.add_stream("aac", rate=info.audio_rate, layout=info.layout)
                audio.bit_rate = self.config.broadcast_audio_kbits * 1000
                self._audio = audio
                self._audio_next, self._pcm_parts, self._pcm_held = None, [], 0
        except BaseException:
            container.close()
            raise
        self._container = container
        start = template.pts_us if template is not None else pts_us
        assert start is not None
        self._clock.start(start)
        self._connected = False  # RTMP connects on the first write

    def _own_video_stream(self, container: av.container.OutputContainer) -> av.video.stream.VideoStream:
        cfg, info = self.config, self.info
        kbits = cfg.broadcast_bitrate_kbits or 0
        stream = container.add_stream(
            "libx264",
            rate=info.fps,
            options={
                "preset": info.preset,
                "tune": "zerolatency",  # no frames held back: the broadcast's delay is the CDN's, not ours
                "x264-params": f"vbv-maxrate={kbits}:vbv-bufsize={2 * kbits}",
            },
        )
        stream.width, stream.height = info.width, info.height
        stream.pix_fmt = "yuv420p"
        stream.bit_rate = kbits * 1000
        stream.gop_size = max(1, round(cfg.broadcast_keyint_s * info.fps))
        stream.codec_context.time_base = US
        stream.codec_context.max_b_frames = 0
        self._force_key = True
        return stream

    def _on_frame(self, frame: av.VideoFrame, pts_us: int) -> None:
        if self._container is None:
            if not self._ready_to_open():
                self.stats.skipped += 1
                return
            self._open(template=None, pts_us=pts_us)
        assert self._video is not None
        t = self._clock.stamp("video", pts_us)
        if t is None:
            return
        frame.pts = t
        frame.time_base = US
        frame.pict_type = PictureType.I if self._force_key else PictureType.NONE
        self._force_key = False
        for packet in self._video.encode(frame):
            self._mux(packet, video=True)
        self.stats.seconds = t / 1e6

    def _on_pcm(self, chunk: AudioChunk) -> None:
        """Captured audio → AAC frames of exactly 1024 samples, stamped by the samples they follow."""
        if self._audio is None:
            return
        t = self._clock.stamp("audio", chunk.pts_us)
        if t is None:
            return
        rate = self.info.audio_rate
        expected = round(t * rate / 1e6)
        if self._audio_next is None or abs(self._audio_next + self._pcm_held - expected) > rate // 10:
            # The start, or the audio clock drifted 100 ms from video: anchor to this chunk.
            self._audio_next, self._pcm_parts, self._pcm_held = expected, [], 0
        self._pcm_parts.append(np.asarray(chunk.frames, dtype=np.float32))
        self._pcm_held += len(chunk.frames)
        if self._pcm_held < AAC_FRAME:
            return
        samples = np.concatenate(self._pcm_parts)
        whole = len(samples) // AAC_FRAME * AAC_FRAME
        rest = samples[whole:]
        self._pcm_parts, self._pcm_held = ([rest] if len(rest) else []), len(rest)
        planar = np.ascontiguousarray(samples[:whole].T)  # (channels, n): AAC's native planar float
        for start in range(0, whole, AAC_FRAME):
            frame = av.AudioFrame.from_ndarray(
                np.ascontiguousarray(planar[:, start : start + AAC_FRAME]), format="fltp", layout=self.info.layout
            )
            frame.sample_rate = rate
            frame.pts = self._audio_next
            frame.time_base = Fraction(1, rate)
            self._audio_next += AAC_FRAME
            for packet in self._audio.encode(frame):
                self._mux(packet, video=False)

    def _muxed(self) -> None:
        if not self._connected:
            self._connected = True
            self._up_since = time.monotonic()
            self.stats.connects += 1
            self.stats.state = "live"
            log.info("broadcast: live on %s", self.stats.target)

    def _failed(self, exc: Exception) -> None:
        self.stats.failures += 1
        self.stats.last_error = str(exc)
        self._close_container()
        self._gate.lost()
        now = time.monotonic()
        self._retry_at = self._backoff.failed(now, self._up_since if self._connected else None)
        self._connected = False
        self.stats.state = "reconnecting"
        log.warning(
            "broadcast to %s: %s; trying again in %.1f s", self.stats.target, exc, max(0.0, self._retry_at - now)
        )

    def _finish(self) -> None:
        super()._finish()
        self.stats.state = "stopped"


@dataclass(slots=True)
class Outputs:
    """The host's recording and broadcast, if any: one call per packet from the host."""

    outputs: list[MediaOutput] = field(default_factory=list)

    @classmethod
    def open(cls, config: OutputConfig, info: StreamInfo) -> Outputs:
        config.check()
        outputs: list[MediaOutput] = []
        if config.record is not None:
            outputs.append(Recorder(config.record, info))
        if config.broadcast is not None:
            outputs.append(Broadcaster(config.broadcast, info, config))
        for out in outputs:
            out.start()
        return cls(outputs)

    @property
    def wants_frames(self) -> bool:
        return any(not o.wants_packets for o in self.outputs)

    def push_video(self, packet: EncodedVideo) -> None:
        for o in self.outputs:
            if o.wants_packets:
                o.push(("video", packet))

    def push_frame(self, frame: av.VideoFrame, pts_us: int) -> None:
        for o in self.outputs:
            if not o.wants_packets:
                o.push_frame(frame, pts_us)

    def push_audio(self, packets: list[EncodedAudio]) -> None:
        for o in self.outputs:
            if o.audio_input == "packets":
                for p in packets:
                    o.push(("audio", p))

    def push_pcm(self, chunk: AudioChunk) -> None:
        for o in self.outputs:
            if o.audio_input == "pcm":
                o.push(("pcm", chunk))

    def close(self) -> None:
        for o in self.outputs:
            o.close()

    def status(self) -> str:
        parts = []
        for o in self.outputs:
            st = o.stats
            if isinstance(o, Recorder):
                parts.append(f"recording {st.seconds:.0f} s ({st.bytes_written / 1e6:.1f} MB)")
            else:
                parts.append(f"broadcast {st.state}" + (f" ({st.failures} failures)" if st.failures else ""))
        return "".join(f"; {p}" for p in parts)

    def summary(self) -> list[dict[str, Any]]:
        return [o.summary() for o in self.outputs]
