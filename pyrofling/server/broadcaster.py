"""``--broadcast rtmp://…``: FLV with H.264 and AAC to an RTMP ingest, reconnecting with backoff when it goes away.

RTMP carries only AAC, so the broadcast encodes AAC from the captured audio.
Asked to (``--broadcast-bitrate-kbits``), it runs its own H.264 encoder on the
host's pictures: a normal GOP and a lower bitrate suit a CDN better than the
viewers' intra refresh.
"""

from __future__ import annotations

import logging
import time
from fractions import Fraction

import av
import numpy as np
import numpy.typing as npt
from av.video.frame import PictureType

from pyrofling.core.host.recording import Backoff
from pyrofling.server.audio import AudioChunk
from pyrofling.server.encoder import EncodedVideo
from pyrofling.server.muxing import AAC_FRAME, US, MediaOutput, OutputConfig, StreamInfo, redact_url
from pyrofling.wire import AudioCodec, VideoCodec

log = logging.getLogger(__name__)


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
