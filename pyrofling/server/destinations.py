"""Recording, broadcasting and spectators: the host's stream muxed into a local file, sent to an RTMP server, or
published as RTP into a Janus SFU.

All take the packets the host already encoded for its viewers, with no second encode (:mod:`.recorder`,
:mod:`.broadcaster`, :mod:`.spectators`). The recording and the broadcast are each a thread with a bounded queue
(:mod:`.muxing`); the spectators' RTP leaves a non-blocking socket on the event loop. The host pushes a packet
after it has gone to the direct viewers, and a push never waits, so nothing an output does can delay a viewer.
:class:`Destinations` is the set the host pushes to (where else the stream goes).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import av

from pyrofling.core.host.keyframes import KeyframePolicy
from pyrofling.server.audio import AudioChunk, AudioEncoder, AudioSource, EncodedAudio
from pyrofling.server.broadcaster import Broadcaster
from pyrofling.server.config import HostConfig
from pyrofling.server.encoder import EncodedVideo, VideoEncoder
from pyrofling.server.janus_api import SpectatorsOptions
from pyrofling.server.muxing import MediaOutput, OutputConfig, StreamInfo
from pyrofling.server.recorder import Recorder
from pyrofling.server.spectators import Spectators
from pyrofling.wire import AudioCodec, VideoCodec

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Destinations:
    """The host's recording, broadcast and spectators, if any: one call per packet from the host."""

    outputs: list[MediaOutput] = field(default_factory=list)
    spectators: Spectators | None = None

    @classmethod
    def open(cls, config: OutputConfig, info: StreamInfo, keyframes: KeyframePolicy | None = None) -> Destinations:
        config.check()
        outputs: list[MediaOutput] = []
        if config.record is not None:
            outputs.append(Recorder(config.record, info))
        if config.broadcast is not None:
            outputs.append(Broadcaster(config.broadcast, info, config))
        for out in outputs:
            out.start()
        spectators = None
        if config.spectators is not None:
            if info.video_codec != VideoCodec.H264:
                raise ValueError(
                    f"--spectators: browsers are sent H.264 through Janus, the stream is {info.video_codec.name}"
                )
            options = SpectatorsOptions(config.spectators, config.spectators_admin_key, config.spectators_id,
                                        edges=config.spectators_edges)  # fmt: skip
            spectators = Spectators(options, keyframes or KeyframePolicy(), opus=info.audio_codec == AudioCodec.OPUS)
            spectators.start()
        return cls(outputs, spectators)

    @property
    def wants_frames(self) -> bool:
        return any(not o.wants_packets for o in self.outputs)

    def push_video(self, packet: EncodedVideo) -> None:
        for o in self.outputs:
            if o.wants_packets:
                o.push(("video", packet))
        if self.spectators is not None:
            self.spectators.video(packet)

    def push_frame(self, frame: av.VideoFrame, pts_us: int) -> None:
        for o in self.outputs:
            if not o.wants_packets:
                o.push_frame(frame, pts_us)

    def push_audio(self, packets: list[EncodedAudio]) -> None:
        for o in self.outputs:
            if o.audio_input == "packets":
                for p in packets:
                    o.push(("audio", p))
        if self.spectators is not None:
            self.spectators.audio(packets)

    def push_pcm(self, chunk: AudioChunk) -> None:
        for o in self.outputs:
            if o.audio_input == "pcm":
                o.push(("pcm", chunk))

    def close(self) -> None:
        for o in self.outputs:
            o.close()
        if self.spectators is not None:
            self.spectators.close()

    def status(self) -> str:
        parts = []
        for o in self.outputs:
            st = o.stats
            if isinstance(o, Recorder):
                parts.append(f"recording {st.seconds:.0f} s ({st.bytes_written / 1e6:.1f} MB)")
            else:
                parts.append(f"broadcast {st.state}" + (f" ({st.failures} failures)" if st.failures else ""))
        if self.spectators is not None:
            parts.append(f"spectators {self.spectators.core.phase.value}")
        return "".join(f"; {p}" for p in parts)

    def summary(self) -> list[dict[str, Any]]:
        out = [o.summary() for o in self.outputs]
        if self.spectators is not None:
            out.append({"kind": "spectators", **self.spectators.summary()})
        return out


def open_destinations(
    config: HostConfig,
    encoder: VideoEncoder,
    audio: AudioEncoder | None,
    audio_source: AudioSource | None,
    keyframes: KeyframePolicy | None = None,
) -> Destinations:
    """The host's recording, broadcast and spectators, opened for its stream (none: an empty set); ``keyframes``:
    the host's, which the spectators' key-frame requests go to."""
    if not config.outputs.enabled:
        return Destinations()
    info = StreamInfo(
        width=config.encoder.width,
        height=config.encoder.height,
        fps=config.encoder.fps,
        video_codec=encoder.video_codec,
        preset=config.encoder.preset,
        audio_codec=audio.codec if audio is not None else AudioCodec.NONE,
        audio_rate=audio_source.rate if audio_source is not None else 0,
        audio_channels=config.audio.channels,
    )
    destinations = Destinations.open(config.outputs, info, keyframes)
    if destinations.wants_frames:
        encoder.frame_tap = destinations.push_frame
    return destinations
