"""``--record FILE.mkv``: the viewers' packets and the wire's audio muxed into Matroska; a crash loses a second.

A cluster is written at least once a second and flushed each time; a clean stop
(Ctrl-C, SIGTERM) writes the index too.
"""

from __future__ import annotations

import logging
from pathlib import Path

import av

from pyrofling.server.audio import EncodedAudio
from pyrofling.server.encoder import EncodedVideo
from pyrofling.server.muxing import RAW_FORMATS, US, MediaOutput, StreamInfo
from pyrofling.wire import AudioCodec

log = logging.getLogger(__name__)


class Recorder(MediaOutput):
    """``--record FILE.mkv``: the viewers' video and audio packets in a Matroska file."""

    kind = "recording"

    def __init__(self, path: Path, info: StreamInfo) -> None:
        super().__init__(str(path), info)
        self.path = path
        self._pcm: list[EncodedAudio] = []
        if info.video_codec not in RAW_FORMATS:
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
