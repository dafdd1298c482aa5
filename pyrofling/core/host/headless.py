"""What the host's headless desktop needs and asks for (pure): the programs it runs, and the recording's caps.

The shells are :mod:`pyrofling.server.headless`; ``docs/headless.md`` has the measurements.
"""

from __future__ import annotations

import math
from collections.abc import Callable

#: The programs a headless desktop runs, and the Debian package each comes in (``scripts/setup`` installs them).
PROGRAMS = {
    "dbus-daemon": "dbus",
    "pipewire": "pipewire",
    "wireplumber": "wireplumber",
    "mutter": "mutter",
}
#: What X11 programs need besides (Xwayland, which mutter starts).
X11_PROGRAMS = {"Xwayland": "xwayland"}
#: mutter 43 drops a frame that comes sooner than 1/max-framerate after the last, and its frame clock jitters:
#: asked for the stream's own rate it delivered about 60 % of it, asked for 1.5 times the rate close to all of it
#: (90 for 60: 70 frames a second at 720p).  The programs in the desktop then see a monitor of that rate.
RATE_HEADROOM = 1.5


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
