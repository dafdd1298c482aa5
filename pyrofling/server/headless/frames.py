"""The virtual monitor's frames, out of the desktop's PipeWire through GStreamer (``pipewiresrc`` into an appsink).

``pipewiresrc`` is given a socket already connected to the desktop's PipeWire
(``fd``), so the host's own ``XDG_RUNTIME_DIR`` (and a second desktop's) never
matters. Frames come on GStreamer's streaming thread, BGRx, and GStreamer's
``videoconvert`` makes them the encoder's I420 there (BT.709, full range: what the
stream announces), so the encoder converts nothing and the copies into Python are
of 1.4 MB a 720p frame rather than 3.7 (measured: 'bench capture --sources',
docs/headless.md). :meth:`latest` hands the newest to the heartbeat, which never
waits for one (with immediate encode, :attr:`on_frame` tells it one came). mutter
sends a frame only when something changed, so the last one stays the picture;
``keepalive-time`` has PipeWire resend it now and then, which also lets a new size
through on a still desktop.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import av
import numpy as np

from pyrofling.core.host.headless import ResizeGate

#: PipeWire resends the last frame after this long without a new one (ms).
KEEPALIVE_MS = 250


#: GStreamer's colorimetry (range:matrix:transfer:primaries) for what the encoder announces: BT.709, full range.
FULL_RANGE_BT709 = "1:3:5:1"


def i420_frame(data: bytes, width: int, height: int) -> av.VideoFrame:
    """A PyAV yuv420p frame of GStreamer's I420 buffer (each plane's rows padded to 4 bytes)."""
    luma_stride, chroma_stride = -(-width // 4) * 4, -(-(width // 2) // 4) * 4
    pixels = np.frombuffer(data, np.uint8)
    if chroma_stride * 2 == width:  # no padding (widths of multiples of 8): the planes as they lie
        return av.VideoFrame.from_ndarray(pixels[: width * height * 3 // 2].reshape(height * 3 // 2, width), "yuv420p")
    luma = pixels[: luma_stride * height].reshape(height, luma_stride)[:, :width]
    chroma_size = chroma_stride * (height // 2)
    u = pixels[luma_stride * height :][:chroma_size].reshape(height // 2, chroma_stride)[:, : width // 2]
    v = pixels[luma_stride * height + chroma_size :][:chroma_size].reshape(height // 2, chroma_stride)[:, : width // 2]
    planar = np.concatenate([luma.reshape(-1), u.reshape(-1), v.reshape(-1)]).reshape(height * 3 // 2, width)
    return av.VideoFrame.from_ndarray(planar, format="yuv420p")


def gstreamer() -> Any:
    """GStreamer, initialised, with PipeWire's elements (RuntimeError: what to install)."""
    try:
        import gi

        gi.require_version("Gst", "1.0")
        from gi.repository import Gst
    except (ImportError, ValueError) as exc:
        raise RuntimeError(
            "GStreamer for Python is missing: pip install 'pyrofling[headless]' and apt-get install "
            "gir1.2-gstreamer-1.0 gstreamer1.0-pipewire"
        ) from exc
    Gst.init(None)
    if Gst.ElementFactory.find("pipewiresrc") is None:
        raise RuntimeError("GStreamer has no pipewiresrc: apt-get install gstreamer1.0-pipewire")
    return Gst


class MonitorFrames:
    """:meth:`start`, then :meth:`latest` as often as the heartbeat likes; :meth:`stop`."""

    def __init__(
        self,
        pipewire: Path | int,
        node_id: int,
        caps: str,
        size: tuple[int, int],
        *,
        last: tuple[av.VideoFrame | None, float | None] = (None, None),
    ) -> None:
        """``pipewire``: the PipeWire's socket, or a connection to it already open (the desktop portal's); ``last``:
        the picture to hand over until the first frame (a restarted compositor's recording: the old one's last)."""
        self._gst = Gst = gstreamer()
        if isinstance(pipewire, int):
            self._socket = socket.socket(fileno=pipewire)
        else:
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._socket.connect(str(pipewire))
        self._pipeline = Gst.parse_launch(
            f"pipewiresrc fd={self._socket.fileno()} path={node_id} always-copy=false "
            f"keepalive-time={KEEPALIVE_MS} ! capsfilter name=caps caps={caps} ! "
            f"videoconvert ! video/x-raw,format=I420,colorimetry={FULL_RANGE_BT709} ! "
            "appsink name=sink emit-signals=true sync=false max-buffers=2 drop=true"
        )
        self._pipeline.get_by_name("sink").connect("new-sample", self._sample)
        # When each frame came out of PipeWire, before its conversion (one streaming thread: the same frame).
        self._came_s = 0.0
        self._pipeline.get_by_name("caps").get_static_pad("src").add_probe(Gst.PadProbeType.BUFFER, self._came)
        self._lock = threading.Lock()
        self._latest, self._latest_s = last  # the newest frame, and when it came out of PipeWire (monotonic)
        self._fresh = False  # the latest frame was not handed over yet
        self._resizing = ResizeGate()
        #: Called (on GStreamer's thread) after each frame comes.
        self.on_frame: Callable[[], None] | None = None
        #: Frames taken out of PipeWire, and the monotonic time of the first.
        self.frames = 0
        self.first_s: float | None = None
        self._size = size

    def start(self) -> None:
        if self._pipeline.set_state(self._gst.State.PLAYING) == self._gst.StateChangeReturn.FAILURE:
            raise RuntimeError("the desktop's frames could not be recorded (pipewiresrc would not start)")

    def _came(self, pad: Any, info: Any) -> Any:
        self._came_s = time.monotonic()
        caps = pad.get_current_caps()
        if caps is not None:
            structure = caps.get_structure(0)
            size = (structure.get_value("width"), structure.get_value("height"))
            with self._lock:
                whole = self._resizing.whole(size, info.get_buffer().get_size())
            if not whole:  # the old monitor's picture under the new size's caps
                return self._gst.PadProbeReturn.DROP
        return self._gst.PadProbeReturn.OK

    def _sample(self, sink: Any) -> Any:
        Gst = self._gst
        sample = sink.emit("pull-sample")
        structure = sample.get_caps().get_structure(0)
        width, height = structure.get_value("width"), structure.get_value("height")
        now = self._came_s
        with self._lock:
            admitted = self._resizing.admit((width, height), now)
        if not admitted:  # the old monitor's, mid-change: the last whole picture stays (and nothing is copied)
            return Gst.FlowReturn.OK
        buffer = sample.get_buffer()
        ok, info = buffer.map(Gst.MapFlags.READ)
        if not ok:
            return Gst.FlowReturn.OK
        try:
            frame = i420_frame(info.data, width, height)
        finally:
            buffer.unmap(info)
        with self._lock:
            self._latest, self._latest_s, self._fresh = frame, now, True
            self._size = (width, height)
            self.frames += 1
            self.first_s = self.first_s or now
        if self.on_frame is not None:
            self.on_frame()
        return Gst.FlowReturn.OK

    def set_caps(self, caps: str, size: tuple[int, int]) -> None:
        """Ask for other caps (a new ``size``): pipewiresrc renegotiates with mutter at its next buffer, and the
        monitor is remade at the new size (the keepalive brings that buffer on a still desktop); frames of the old
        size are held back meanwhile (:class:`~pyrofling.core.host.headless.ResizeGate`)."""
        with self._lock:
            self._resizing.asked(size, time.monotonic())
        self._pipeline.get_by_name("caps").set_property("caps", self._gst.Caps.from_string(caps))

    def latest(self) -> tuple[av.VideoFrame | None, float | None]:
        """The newest frame, and when it came (monotonic); (None, None) before the first."""
        with self._lock:
            self._fresh = False
            return self._latest, self._latest_s

    def last_came_s(self) -> float | None:
        """When the newest frame came (monotonic; None before the first)."""
        with self._lock:
            return self._latest_s

    def has_new(self) -> bool:
        """Has a frame come since :meth:`latest` last handed one over?"""
        with self._lock:
            return self._fresh

    def size(self) -> tuple[int, int]:
        """The monitor's size: its latest frame's (the size asked for, before the first)."""
        with self._lock:
            return self._size

    def error(self) -> str | None:
        """The pipeline's error, if it stopped with one."""
        bus = self._pipeline.get_bus()
        message = bus.pop_filtered(self._gst.MessageType.ERROR)
        if message is None:
            return None
        err, debug = message.parse_error()
        return f"{err.message} ({debug})" if debug else str(err.message)

    def stop(self) -> None:
        self._pipeline.set_state(self._gst.State.NULL)
        self._socket.close()


class RecordedDesktop:
    """What the host's heartbeat asks of a recorded desktop (a :class:`~pyrofling.server.sources.VideoSource` of
    yuv420p PyAV frames, sized as the desktop's pictures are): the newest frame, whether one came, and when."""

    pixel_format = "yuv420p"
    #: The stream is the monitor's size, whatever it is now (the heartbeat has the encoder follow).
    sized_by_pictures = True

    def __init__(self, frames: MonitorFrames) -> None:
        self.frames = frames
        width, height = frames.size()
        #: What is streamed until the desktop's first frame (a fraction of a second): black, at the monitor's size.
        self._blank = av.VideoFrame.from_ndarray(np.zeros((height, width, 4), np.uint8), format="bgra")
        #: Why the source ended (None while it runs): :meth:`read` then ends the stream.
        self._ended: str | None = None
        #: When the picture :meth:`read` last handed over came out of the desktop (monotonic; None for the blank).
        self.captured_s: float | None = None

    def has_new(self) -> bool:
        """A frame came from the desktop that was not read yet (mutter sends one only when something changed)."""
        return self.frames.has_new()

    def notify_frames(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from GStreamer's thread) when a frame comes: immediate encode."""
        self.frames.on_frame = callback

    def read(self, index: int, capture_us: int) -> av.VideoFrame | None:
        if self._ended is not None:
            return None
        frame, self.captured_s = self.frames.latest()
        return frame or self._blank

    def _recording_failed(self) -> str | None:
        error = self.frames.error()
        return f"recording failed: {error}" if error else None
