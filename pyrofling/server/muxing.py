"""The muxing thread every output runs: a bounded queue in front, a container behind, never a wait for the host.

The host pushes a packet after it has gone to the direct viewers, and a push
never waits.  An output that falls behind (a slow disk, a stalled server) drops
packets and starts again at the next key frame
(:class:`~pyrofling.core.bitstream.KeyGate`); container timestamps start at zero
and only grow (:class:`~pyrofling.core.host.recording.StreamClock`).  Subclasses say what
goes into which container: :mod:`.recorder`, :mod:`.broadcaster`.
"""

from __future__ import annotations

import io
import logging
import re
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av

from pyrofling.core.bitstream import KeyGate, KeyInfo
from pyrofling.core.host.recording import StreamClock
from pyrofling.files import unwritable
from pyrofling.runtime import THREAD_PRIORITIES
from pyrofling.server.audio import AudioChunk, EncodedAudio
from pyrofling.server.encoder import EncodedVideo
from pyrofling.wire import AudioCodec, VideoCodec

log = logging.getLogger(__name__)

US = Fraction(1, 1_000_000)
#: Elementary stream formats that read a codec's parameters from its own key frame.
RAW_FORMATS = {VideoCodec.H264: "h264", VideoCodec.H265: "hevc"}
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
    #: A Janus HTTP API (http://HOST:8088/janus) to publish the stream into for spectators (None: no spectators).
    spectators: str | None = None
    #: The Janus streaming plugin's admin_key, where it has one.
    spectators_admin_key: str | None = None
    #: The mountpoint's id (None: one of Janus's choosing).
    spectators_id: int | None = None
    #: Edge Janus servers that ``spectators`` (then the origin) feeds, each with a mountpoint of the same id.
    spectators_edges: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return self.record is not None or self.broadcast is not None or self.spectators is not None

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
        if self.spectators is not None and not re.match(r"^https?://[^/]+", self.spectators):
            raise ValueError(
                "--spectators takes the HTTP API address of a Janus server, e.g. http://127.0.0.1:8088/janus"
            )
        for edge in self.spectators_edges:
            if self.spectators is None:
                raise ValueError("--spectators-edge needs --spectators: the origin Janus that feeds the edges")
            if not re.match(r"^https?://[^/]+", edge):
                raise ValueError(
                    f"--spectators-edge {edge!r}: give an edge Janus's HTTP API, e.g. http://EDGE:8088/janus"
                )
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
        THREAD_PRIORITIES.apply("output")  # not the raised priority of the event loop that started it
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
        fmt = RAW_FORMATS.get(self.info.video_codec)
        if fmt is None:
            raise ValueError(f"cannot mux {self.info.video_codec.name} video")
        with av.open(io.BytesIO(packet.data), format=fmt) as parsed:
            stream = container.add_stream_from_template(parsed.streams.video[0])
        stream.time_base = Fraction(1, 1000)
        self._video = stream

    def summary(self) -> dict[str, Any]:
        return asdict(self.stats)
