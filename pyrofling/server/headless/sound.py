"""The headless desktop's sound: what its programs play into its own sink, recorded out of its PipeWire.

``pipewiresrc`` (through GStreamer, on a socket connected to the desktop's PipeWire,
as the frames are) records the sink's monitor (``stream.capture.sink``) in the
host's format; PipeWire hands it about 5 ms at a time, and the chunks go to the
host's audio encoder as a game's audio does (cut to the host's chunk length, each
stamped with its arrival). An idle sink records silence, so the stream's audio
clock never stops. Nothing the machine's other desktops play is heard, and nothing
played here reaches the machine's own sound card.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from pyrofling.core.host.headless import SINK_NAME
from pyrofling.server.audio import AudioConfig, ChunkSink, GameAudioSource
from pyrofling.server.headless.frames import gstreamer


class DesktopSound:
    """An :class:`~pyrofling.server.audio.AudioSource`: :meth:`start` records the desktop's sink until :meth:`close`."""

    def __init__(self, pipewire_socket: Path, config: AudioConfig) -> None:
        self._gst = Gst = gstreamer()
        self.rate, self.channels = config.rate, config.channels
        self._chunks = GameAudioSource(config)  # cuts what arrives into the host's chunks, stamped on arrival
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.connect(str(pipewire_socket))
        # Caps written out in full: with fewer, pipewiresrc never makes its node (measured).
        self._pipeline = Gst.parse_launch(
            f"pipewiresrc fd={self._socket.fileno()} target-object={SINK_NAME} always-copy=true "
            'stream-properties="props,stream.capture.sink=true,node.name=pyrofling-host-recording" ! '
            f"audio/x-raw,format=S16LE,layout=interleaved,rate={self.rate},channels={self.channels} ! "
            "appsink name=sink emit-signals=true sync=false"
        )
        self._pipeline.get_by_name("sink").connect("new-sample", self._sample)
        #: Bytes of sound recorded so far.
        self.recorded_bytes = 0

    def start(self, sink: ChunkSink) -> None:
        self._chunks.start(sink)
        if self._pipeline.set_state(self._gst.State.PLAYING) == self._gst.StateChangeReturn.FAILURE:
            raise RuntimeError("the desktop's sound could not be recorded (pipewiresrc would not start)")

    def _sample(self, appsink: Any) -> Any:
        Gst = self._gst
        buffer = appsink.emit("pull-sample").get_buffer()
        ok, info = buffer.map(Gst.MapFlags.READ)
        if ok:
            try:
                self._chunks.feed(bytes(info.data))
                self.recorded_bytes += info.size
            finally:
                buffer.unmap(info)
        return Gst.FlowReturn.OK

    def close(self) -> None:
        self._chunks.close()
        self._pipeline.set_state(self._gst.State.NULL)
        self._socket.close()
