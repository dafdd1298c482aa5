"""The headless desktop as a video source: the desktop, its virtual monitor, its frames and the person's program.

:func:`open_headless` starts them in order (on the host's event loop: the bus is
asyncio); :meth:`HeadlessSource.read` is the heartbeat's, and hands the newest
frame (the placeholder until the first). The source ends, and with it the stream,
when the program or the desktop ends; :meth:`close` stops everything.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable

import av
import numpy as np

from pyrofling.core.host.headless import recording_caps
from pyrofling.server.audio import AudioConfig
from pyrofling.server.headless.desktop import HeadlessDesktop
from pyrofling.server.headless.frames import MonitorFrames
from pyrofling.server.headless.remote_input import DesktopInput
from pyrofling.server.headless.screencast import VirtualMonitor
from pyrofling.server.headless.sound import DesktopSound

log = logging.getLogger(__name__)


class HeadlessSource:
    """A :class:`~pyrofling.server.sources.VideoSource` of PyAV frames (yuv420p, as the encoder takes them)."""

    pixel_format = "yuv420p"
    #: The stream is the monitor's size, whatever it is now (the heartbeat has the encoder follow).
    sized_by_pictures = True

    def __init__(self, desktop: HeadlessDesktop, monitor: VirtualMonitor, frames: MonitorFrames) -> None:
        self.desktop, self.monitor, self.frames = desktop, monitor, frames
        self.program: subprocess.Popen[bytes] | None = None
        width, height = frames.size()
        #: What is streamed until the desktop's first frame (a fraction of a second): black, at the monitor's size.
        self._blank = av.VideoFrame.from_ndarray(np.zeros((height, width, 4), np.uint8), format="bgra")
        self._ended: str | None = None
        #: When the picture :meth:`read` last handed over came out of the desktop (monotonic; None for the blank).
        self.captured_s: float | None = None
        assert desktop.bus is not None
        #: The viewers' keys and pointer go into the desktop (the host uses these instead of uinput's).
        self.input_devices = DesktopInput(desktop.bus, monitor.session_path, monitor.stream_path, frames.size)

    def sound(self, config: AudioConfig) -> DesktopSound:
        """What the desktop's programs play (the host's audio source, ``--audio desktop``)."""
        return DesktopSound(self.desktop.pipewire_socket, config)

    def follow(self, width: int, height: int, refresh_hz: float) -> None:
        """Make the monitor this size and rate (a viewer's display): the recording asks mutter for it, which remakes
        the monitor (its programs see a new screen size; full-screen windows take it) in a fraction of a second."""
        self.frames.set_caps(recording_caps(width, height, refresh_hz))

    def has_new(self) -> bool:
        """A frame came from the desktop that was not read yet (mutter sends one only when something changed)."""
        return self.frames.has_new()

    def notify_frames(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from GStreamer's thread) when a frame comes: immediate encode."""
        self.frames.on_frame = callback

    def read(self, index: int, capture_us: int) -> av.VideoFrame | None:
        if self._ended is None:
            self._ended = self._why_ended()
            if self._ended is not None:
                log.warning("headless desktop: %s; the stream ends", self._ended)
        if self._ended is not None:
            return None
        frame, self.captured_s = self.frames.latest()
        return frame or self._blank

    def _why_ended(self) -> str | None:
        if self.program is not None and self.program.poll() is not None:
            return f"the program ended (exit status {self.program.returncode})"
        gone = self.desktop.ended()
        if gone is not None:
            return f"its {gone} ended{self.desktop.last_words(gone)}"
        error = self.frames.error()
        return f"recording failed: {error}" if error else None

    def close(self) -> None:
        self.frames.stop()
        self.desktop.close()


async def open_headless(
    width: int, height: int, fps: float, command: str | None, *, x11: bool = True
) -> HeadlessSource:
    """A desktop with a virtual monitor of ``width``×``height`` recorded at ``fps``, ``command`` running in it."""
    desktop = HeadlessDesktop(x11=x11)
    await desktop.start()
    try:
        assert desktop.bus is not None
        monitor = VirtualMonitor(desktop.bus)
        node = await monitor.start()
        frames = MonitorFrames(desktop.pipewire_socket, node, recording_caps(width, height, fps), (width, height))
        frames.start()
        source = HeadlessSource(desktop, monitor, frames)
        if command:  # after the monitor exists: a program started before sees no screen (a 0x0 X root)
            source.program = desktop.run(command)
            log.info("headless desktop: running %s", command)
    except BaseException:
        desktop.close()
        raise
    return source
