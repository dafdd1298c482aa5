"""Where pictures go: what a display must do, the headless one, the pictures it is handed, and whether a window
can open here at all (a display named in the environment, and an X server answering on it), and whether its
flips wait for the refresh."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


def display_problem() -> str | None:
    """Why no window can open here (no display, or one nobody answers on), or None.

    Checked before any window is made: pyglet fails on a missing display with a long traceback,
    at import time even, so the check imports it itself and turns the failure into one line.
    """
    name = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    if not name:
        return "no display (DISPLAY is not set)"
    try:
        import pyglet

        pyglet.display.get_display()
    except Exception as exc:  # pyglet's exception types differ per platform
        return f"cannot open a window on display {name!r} ({exc})"
    return None


@dataclass(frozen=True, slots=True)
class PictureTiming:
    """When a picture passed each stage on the viewer (monotonic seconds), for the frame trace."""

    capture_us: int | None  # the host's capture time, on the host's clock (from the frame marker)
    first_s: float  # its first datagram arrived
    complete_s: float  # its last needed datagram arrived
    queued_s: float  # handed to the decode thread
    decode_start_s: float
    decoded_s: float


@dataclass(frozen=True, slots=True)
class Picture:
    """A decoded picture waiting to be presented."""

    prepared: Any  # what the display made of it on the decode thread (an RGB texture source, or None)
    pts_us: int
    done_s: float  # decoded and prepared: ready to show
    capture_s: float | None  # the host's capture time on our clock (from the frame marker), if known
    frame_id: int | None
    clean: bool | None = None  # matched the test scene (benches check it); None: not checked
    timing: PictureTiming | None = None


class Display(Protocol):
    """Where pictures go.  ``prepare`` runs on the decode thread, the rest on the presenter's."""

    #: The display's refresh rate if it knows it (None: use the stream's).
    refresh_hz: float | None
    #: True when :meth:`present` blocks until the refresh (a working vsync): then the flip's
    #: return is the vblank.  False: the presenter keeps a software refresh clock.
    vsync_blocks: bool

    def prepare(self, frame: Any) -> Any: ...

    def present(self, picture: Picture | None) -> None:
        """Show ``picture`` (None: the previous one stays; redraw if needed)."""
        ...

    def pump_events(self) -> bool:
        """Handle window events; False when the display was closed."""
        ...


class HeadlessDisplay:
    """No screen: pictures are counted, not drawn (bench, tests, ``--headless``)."""

    refresh_hz: float | None = None
    vsync_blocks = False

    def prepare(self, frame: Any) -> Any:
        return None

    def present(self, picture: Picture | None) -> None:
        pass

    def pump_events(self) -> bool:
        return True


def flip_blocks(window: Any, flips: int = 12, rounds: int = 3, clock: Callable[[], float] = time.perf_counter) -> bool:
    """Does a vsync'd flip wait for the refresh here?  Times a few flips of an empty window, with vsync and without.

    Paced flips are never closer than a refresh (4 ms even at 240 Hz). Unpaced ones on a busy or slow machine
    (software GL) can take as long: every one over 3.5 ms under Xvfb on a 2-core machine that runs Python at half
    the usual speed. So the same window's unpaced flips are the yardstick: vsync blocks where its quickest flip is
    well over the quickest unpaced one. A busy moment can slow every flip of one round, so a verdict of "blocks"
    must hold over a few rounds, each paced and unpaced in turn; real vsync blocks in every one."""
    paced = unpaced = float("inf")
    for _ in range(rounds):
        window.set_vsync(False)
        unpaced = min(unpaced, _quickest_flip(window, flips, clock))
        window.set_vsync(True)
        paced = min(paced, _quickest_flip(window, flips, clock))
        if paced <= max(0.0035, 1.5 * unpaced + 0.001):
            return False
    return True


def _quickest_flip(window: Any, flips: int, clock: Callable[[], float]) -> float:
    """The shortest gap between flips of an empty window; the first two may return at once while the swap chain
    has a free buffer, so they do not count (the quickest decides: a busy machine makes some slow, not all)."""
    times = []
    for _ in range(flips):
        window.clear()
        window.flip()
        times.append(clock())
    return min([b - a for a, b in itertools.pairwise(times)][2:])
