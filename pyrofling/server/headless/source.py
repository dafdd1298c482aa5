"""The headless desktop as a video source: the desktop, its virtual monitor, its frames and the person's program.

:func:`open_headless` starts them in order (on the host's event loop: the bus is
asyncio); :meth:`HeadlessSource.read` is the heartbeat's, and hands the newest
frame (the placeholder until the first). A watch on the loop
(:meth:`HeadlessSource.supervise`) starts a compositor that ended again, and the
program with it, while the viewers stay connected and see the last picture
(:class:`~pyrofling.core.host.headless.CompositorRestarts` says how often); the
source ends, and with it the stream, when the program ends, another of the desktop's
processes does, or mutter ends too often; :meth:`close` stops everything.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import time

from pyrofling.core.host.headless import CompositorRestarts, recording_caps
from pyrofling.server.audio import AudioConfig
from pyrofling.server.headless.desktop import DesktopError, HeadlessDesktop
from pyrofling.server.headless.frames import MonitorFrames, RecordedDesktop
from pyrofling.server.headless.remote_input import DesktopInput
from pyrofling.server.headless.screencast import VirtualMonitor
from pyrofling.server.headless.sound import DesktopSound

log = logging.getLogger(__name__)

#: How often the watch looks at the desktop's processes (s).
WATCH_S = 0.25


class HeadlessSource(RecordedDesktop):
    """The host's own desktop as a :class:`~pyrofling.server.sources.VideoSource`."""

    def __init__(
        self, desktop: HeadlessDesktop, monitor: VirtualMonitor, frames: MonitorFrames, caps: str, command: str | None
    ) -> None:
        super().__init__(frames)
        self.desktop, self.monitor = desktop, monitor
        #: What the recording asks mutter for (the monitor's size and rate), and the person's program.
        self._caps, self.command = caps, command
        self.program: subprocess.Popen[bytes] | None = None
        self.restarts = CompositorRestarts()
        self._watch: asyncio.Task[None] | None = None
        assert desktop.bus is not None
        #: The viewers' keys and pointer go into the desktop (the host uses these instead of uinput's).
        self.input_devices = DesktopInput(
            desktop.bus, monitor.session_path, monitor.stream_path, lambda: self.frames.size()
        )

    def sound(self, config: AudioConfig) -> DesktopSound:
        """What the desktop's programs play (the host's audio source, ``--audio desktop``)."""
        return DesktopSound(self.desktop.pipewire_socket, config)

    def follow(self, width: int, height: int, refresh_hz: float) -> None:
        """Make the monitor this size and rate (a viewer's display): the recording asks mutter for it, which remakes
        the monitor (its programs see a new screen size; full-screen windows take it) in a fraction of a second."""
        self._caps = recording_caps(width, height, refresh_hz)
        self.frames.set_caps(self._caps, (width, height))

    def run_program(self) -> None:
        if self.command:  # after the monitor exists: a program started before sees no screen (a 0x0 X root)
            self.program = self.desktop.run(self.command)
            log.info("headless desktop: running %s", self.command)

    def start_watch(self) -> None:
        self._watch = asyncio.get_running_loop().create_task(self.supervise())

    async def supervise(self) -> None:
        """Until the source ends: a compositor that ended is started again (with the program), or the stream ends
        with a line that says why."""
        program_seen_ended = False
        while self._ended is None:
            await asyncio.sleep(WATCH_S)
            gone = self.desktop.ended()
            if gone == "mutter" and self.restarts.ended(time.monotonic()):
                log.warning(
                    "headless desktop: mutter ended%s; starting it again%s, the viewers stay (%s)",
                    self.desktop.last_words("mutter"),
                    f" and {self.command}" if self.command else "",
                    self.restarts.describe(),
                )
                program_seen_ended = False  # the program is started again with it
                try:
                    await self._restart()
                except (DesktopError, RuntimeError, TimeoutError) as exc:
                    self._ended = f"mutter could not be started again: {exc}"
            elif gone is not None:
                self._ended = f"its {gone} ended{self.desktop.last_words(gone)}"
                if gone == "mutter":
                    self._ended += f" ({self.restarts.limit} times in {self.restarts.window_s:g} s: not again)"
            elif self._program_ended() is not None and not program_seen_ended:
                # A compositor killed takes the program with it (its X server goes), and the program can be
                # gone before mutter is: look once more, so that a crash restarts both rather than ending.
                program_seen_ended = True
            else:
                self._ended = self._program_ended() or self._recording_failed()
        log.warning("headless desktop: %s; the stream ends", self._ended)

    async def _restart(self) -> None:
        """mutter again on the same bus and PipeWire, a new monitor at the size asked last, the input pointed at it,
        the program again. Until its first frame the stream shows the last picture."""
        old = self.frames
        await self.desktop.restart_compositor()
        assert self.desktop.bus is not None
        monitor = VirtualMonitor(self.desktop.bus)
        node = await monitor.start()
        frames = MonitorFrames(self.desktop.pipewire_socket, node, self._caps, old.size(), last=old.latest())
        frames.on_frame = old.on_frame
        frames.start()
        self.monitor, self.frames = monitor, frames
        old.stop()
        self.input_devices.rebind(monitor.session_path, monitor.stream_path)
        self.run_program()

    def _program_ended(self) -> str | None:
        if self.program is not None and self.program.poll() is not None:
            return f"the program ended (exit status {self.program.returncode})"
        return None

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
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
        caps = recording_caps(width, height, fps)
        frames = MonitorFrames(desktop.pipewire_socket, node, caps, (width, height))
        frames.start()
        source = HeadlessSource(desktop, monitor, frames, caps, command)
        source.run_program()
        source.start_watch()
    except BaseException:
        desktop.close()
        raise
    return source
