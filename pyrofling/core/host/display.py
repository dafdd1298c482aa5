"""Which display the host's own desktop takes (protocol.md §7.14); pure.

A viewer that negotiated DISPLAY says its display's size and refresh rate
(VIEWER_DISPLAY), again whenever they change. The desktop follows the viewer
that has been connected longest among those that said one (a pyrofling viewer
or a browser on the web door: both say it, the browser in its own words); the others watch it
scaled. A size is made one the encoder and the desktop take (even, within
:data:`MAX_PIXELS`, the viewer's shape kept) and a change goes out at most every
:data:`MIN_INTERVAL_S`: a window dragged to a new size sends many, and each
remakes the desktop's monitor and the encoder. A viewer that says nothing (a
native PyroFling viewer) leaves the host's own size; when the followed viewer
leaves, the next one's is taken, and with nobody left the desktop keeps its size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pyrofling.core.host.state import HostOutput
from pyrofling.wire import ViewerDisplay

#: The largest picture followed (4K UHD); a larger display gets its shape at this many pixels.
MAX_PIXELS = 3840 * 2160
#: The smallest side followed; a smaller display gets this.
MIN_SIDE = 64
#: Refresh rates followed, Hz; outside them (or 0: unknown) the host's own frame rate.
REFRESH_HZ = (24.0, 240.0)
#: The shortest time between two changes.
MIN_INTERVAL_S = 0.25


@dataclass(frozen=True, slots=True)
class DisplayMode:
    width: int
    height: int
    #: 0 when the viewer did not say (the host keeps its own rate).
    refresh_hz: float


@dataclass(frozen=True, slots=True)
class FollowDisplay(HostOutput):
    """Make the host's desktop this size (and refresh rate), for the viewer it follows."""

    mode: DisplayMode
    conn_id: int


def fitted(msg: ViewerDisplay) -> DisplayMode:
    """The mode the desktop takes for a viewer's display: even sides, at least MIN_SIDE, at most MAX_PIXELS."""
    width, height = max(1, msg.width), max(1, msg.height)
    if width * height > MAX_PIXELS:
        scale = math.sqrt(MAX_PIXELS / (width * height))
        width, height = int(width * scale), int(height * scale)
    width, height = max(MIN_SIDE, width - width % 2), max(MIN_SIDE, height - height % 2)
    hz = msg.refresh_mhz / 1000
    return DisplayMode(width, height, hz if REFRESH_HZ[0] <= hz <= REFRESH_HZ[1] else 0.0)


class DisplayFollower:
    """:meth:`stated` and :meth:`left` as viewers say and go; :meth:`handle_timer` at :meth:`next_timer`."""

    def __init__(self, min_interval_s: float = MIN_INTERVAL_S) -> None:
        self.min_interval_s = min_interval_s
        #: What each connection said last, and when it connected.
        self.displays: dict[int, tuple[float, DisplayMode]] = {}
        #: The mode made last.
        self.applied: DisplayMode | None = None
        self._applied_s: float | None = None
        self._due_s: float | None = None
        self.changes = 0

    def stated(self, conn_id: int, msg: ViewerDisplay, now: float, *, connected_s: float) -> list[HostOutput]:
        """Connection ``conn_id``, open since ``connected_s``, says its display."""
        self.displays[conn_id] = (connected_s, fitted(msg))
        return self._follow(now)

    def left(self, conn_id: int, now: float) -> list[HostOutput]:
        if self.displays.pop(conn_id, None) is None:
            return []
        return self._follow(now)

    def wanted(self) -> tuple[int, DisplayMode] | None:
        if not self.displays:
            return None
        first = min(self.displays, key=lambda conn_id: (self.displays[conn_id][0], conn_id))
        return first, self.displays[first][1]

    def next_timer(self) -> float | None:
        return self._due_s

    def handle_timer(self, now: float) -> list[HostOutput]:
        if self._due_s is None or now < self._due_s:
            return []
        self._due_s = None
        return self._follow(now)

    def _follow(self, now: float) -> list[HostOutput]:
        wanted = self.wanted()
        if wanted is None or wanted[1] == self.applied:
            self._due_s = None
            return []
        if self._applied_s is not None and now < self._applied_s + self.min_interval_s:
            self._due_s = self._applied_s + self.min_interval_s
            return []
        conn_id, mode = wanted
        self.applied, self._applied_s, self._due_s = mode, now, None
        self.changes += 1
        return [FollowDisplay(mode, conn_id)]
