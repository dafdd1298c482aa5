"""What the host's headless desktop needs and asks for (pure): the programs it runs, the recording's caps, and the
RemoteDesktop calls that carry the viewers' keys and pointer into it.

The shells are :mod:`pyrofling.server.headless`; ``docs/headless.md`` has the measurements.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

from pyrofling.core.input.keyboard_mouse.codes import ABS_MAX
from pyrofling.core.input.pad.state import (
    ABS_X,
    ABS_Y,
    EV_ABS,
    EV_KEY,
    EV_REL,
    REL_HWHEEL,
    REL_WHEEL,
    REL_X,
    REL_Y,
    Event,
)

#: The programs a headless desktop runs, and the Debian package each comes in (``scripts/setup`` installs them).
PROGRAMS = {
    "dbus-daemon": "dbus",
    "pipewire": "pipewire",
    "wireplumber": "wireplumber",
    "pipewire-pulse": "pipewire-pulse",
    "mutter": "mutter",
}
#: What X11 programs need besides (Xwayland, which mutter starts).
X11_PROGRAMS = {"Xwayland": "xwayland"}
#: mutter 43 drops a frame that comes sooner than 1/max-framerate after the last, and its frame clock jitters:
#: asked for the stream's own rate it delivered about 60 % of it. A program drawing 60 a second at 640x360 (where
#: the 2-core machine keeps up) got 54.4 new pictures a second to the viewer, 19 ms from drawn to decoded, with 1.5
#: times the rate; 59.3 and 12.7 ms with twice ('bench capture --sources', docs/headless.md). The programs in the
#: desktop then see a monitor of that rate (120 Hz for 60): one that waits for each refresh draws that often.
RATE_HEADROOM = 2.0


#: The desktop's own sound card: a PipeWire null sink, made with the desktop and its default, which the host records
#: (48 kHz stereo; PipeWire converts to the host's audio format as it records).
SINK_NAME = "pyrofling-desktop"


#: A PipeWire configuration fragment (``pipewire.conf.d``) that makes the desktop's sink as PipeWire starts.
SINK_CONFIG = (
    "context.objects = [\n"
    "  { factory = adapter\n"
    f"    args = {{ factory.name = support.null-audio-sink node.name = {SINK_NAME}\n"
    '             node.description = "pyrofling desktop" media.class = Audio/Sink object.linger = true\n'
    "             audio.rate = 48000 audio.channels = 2 audio.position = [ FL FR ] } }\n"
    "]\n"
)
#: WirePlumber's remembered defaults (``$XDG_STATE_HOME/wireplumber/default-nodes``): the desktop's sink.
DEFAULT_NODES = f"[default-nodes]\ndefault.configured.audio.sink={SINK_NAME}\n"


def missing_packages(installed: Callable[[str], bool], *, x11: bool = True) -> list[str]:
    """The Debian packages to install for a headless desktop (empty: none), given which programs are on PATH."""
    programs = {**PROGRAMS, **(X11_PROGRAMS if x11 else {})}
    return sorted({package for program, package in programs.items() if not installed(program)})


def recording_rate(fps: float) -> int:
    """The max-framerate to ask the virtual monitor for, to get ``fps`` frames a second out of it."""
    return max(1, math.ceil(fps * RATE_HEADROOM))


def recording_caps(width: int, height: int, fps: float) -> str:
    """The caps that make the virtual monitor: its size is what the recording asks (mutter follows a new one)."""
    if width < 16 or height < 16 or width % 2 or height % 2:
        raise ValueError(f"a virtual monitor of {width}x{height}: give an even size of at least 16x16")
    return f"video/x-raw,format=BGRx,width={width},height={height},max-framerate={recording_rate(fps)}/1"


#: BGRx, as :func:`recording_caps` asks.
BYTES_PER_PIXEL = 4


# -- keys and the pointer, through mutter's RemoteDesktop session ---------------------------------------------------

#: A throwaway press and release sent right after the session starts: mutter 43 loses the first key press of a new
#: RemoteDesktop session (its release arrives), whichever program has the focus.
KEY_LEFTSHIFT = 42


class ResizeGate:
    """Which of the desktop's frames to show while its monitor changes size. Between asking for a new size and the
    first frame of it, mutter still sends frames of the old size, some showing the program already redrawn for
    the new one (its top-left corner): those are held back, the viewers keep the last whole picture, for at most
    ``wait_s`` (a size mutter never makes must not freeze the stream)."""

    def __init__(self, wait_s: float = 2.0) -> None:
        self.wait_s = wait_s
        self._awaited: tuple[int, int] | None = None
        self._asked_s = 0.0
        #: Frames held back so far.
        self.held = 0
        #: Buffers dropped as too small for their size so far.
        self.short = 0

    def asked(self, size: tuple[int, int], now: float) -> None:
        self._awaited, self._asked_s = size, now

    def admit(self, size: tuple[int, int], now: float) -> bool:
        """A frame of ``size`` came at ``now``: hand it over?"""
        if self._awaited is None:
            return True
        if size == self._awaited or now - self._asked_s >= self.wait_s:
            self._awaited = None
            return True
        self.held += 1
        return False

    def whole(self, size: tuple[int, int], nbytes: int) -> bool:
        """Does a buffer of ``nbytes`` hold a picture of ``size``? The first buffer after a change of size can be
        the old monitor's under the new size's caps (seen going 1280x720 to 1920x1080 on a busy machine): converted,
        it would be a flash of green. Such a buffer is dropped (counted in :attr:`short`)."""
        if nbytes >= size[0] * size[1] * BYTES_PER_PIXEL:
            return True
        self.short += 1
        return False


class CompositorRestarts:
    """Whether a compositor that ended is started again: at once, up to ``limit`` times within ``window_s``; past
    that it would most likely end again (a program that crashes it, a broken install), and the stream ends."""

    def __init__(self, limit: int = 3, window_s: float = 60.0) -> None:
        self.limit, self.window_s = limit, window_s
        self._times: list[float] = []

    def ended(self, now: float) -> bool:
        """The compositor ended at ``now``: start it again?"""
        self._times = [t for t in self._times if now - t < self.window_s]
        if len(self._times) >= self.limit:
            return False
        self._times.append(now)
        return True

    def describe(self) -> str:
        return f"restart {len(self._times)} of {self.limit} allowed in {self.window_s:g} s"


class RemoteCall(NamedTuple):
    """One ``org.gnome.Mutter.RemoteDesktop.Session`` method call: its name, D-Bus signature and arguments."""

    member: str
    signature: str
    args: tuple[object, ...]


def _pixel(position: int, size: int) -> float:
    return float(min(size - 1, round(position * size / (ABS_MAX + 1))))


def first_key_fix() -> list[RemoteCall]:
    return [RemoteCall("NotifyKeyboardKeycode", "ub", (KEY_LEFTSHIFT, pressed)) for pressed in (True, False)]


class RemoteInput:
    """The host's keyboard, mouse and pointer reports (evdev events, as uinput gets them) as RemoteDesktop calls.

    Keys and buttons are Linux codes on both sides. Relative motion is summed over a report; a wheel click is one
    discrete step (evdev counts up as away from the user, mutter counts steps down). The absolute pointer spans the
    picture in 0..65535 each way and lands on the nearest of the monitor's whole pixels (the viewer rounded its place
    into those units, and a program under X sees whole pixels, truncated); both axes are kept, since a report carries
    only the one that moved.
    """

    def __init__(self, stream: str, monitor: tuple[int, int]) -> None:
        #: The ScreenCast stream's object path (absolute positions are in its pixels).
        self.stream = stream
        #: The virtual monitor's size now (it follows the recording's).
        self.monitor = monitor
        self._abs = [ABS_MAX // 2 + 1, ABS_MAX // 2 + 1]

    def calls(self, device: str, events: Sequence[Event]) -> list[RemoteCall]:
        out: list[RemoteCall] = []
        dx = dy = 0.0
        placed = False
        for kind, code, value in events:
            if kind == EV_KEY and device == "keyboard":
                out.append(RemoteCall("NotifyKeyboardKeycode", "ub", (code, value != 0)))
            elif kind == EV_KEY and device == "mouse":
                out.append(RemoteCall("NotifyPointerButton", "ib", (code, value != 0)))
            elif kind == EV_REL and code == REL_X:
                dx += value
            elif kind == EV_REL and code == REL_Y:
                dy += value
            elif kind == EV_REL and code == REL_WHEEL and value:
                out.append(RemoteCall("NotifyPointerAxisDiscrete", "ui", (0, -value)))
            elif kind == EV_REL and code == REL_HWHEEL and value:
                out.append(RemoteCall("NotifyPointerAxisDiscrete", "ui", (1, value)))
            elif kind == EV_ABS and code in (ABS_X, ABS_Y):
                self._abs[code - ABS_X] = max(0, min(ABS_MAX, value))
                placed = True
        # Motion first: a click in the same report lands where the pointer went.
        if dx or dy:
            out.insert(0, RemoteCall("NotifyPointerMotionRelative", "dd", (dx, dy)))
        if placed:
            width, height = self.monitor
            x, y = (_pixel(self._abs[0], width), _pixel(self._abs[1], height))
            out.insert(0, RemoteCall("NotifyPointerMotionAbsolute", "sdd", (self.stream, x, y)))
        return out
