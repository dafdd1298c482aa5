"""A program for the headless desktop's tests and benches: a full-screen window whose picture is known and changes.

It shows the frame marker (``pyrofling.core.frame_marker``: its frame id counting up from 1, its time on the
monotonic clock) along the top and a grey that steps with the frame below it, ``--fps`` times a second, through
OpenGL on whatever display it is given (Xwayland in the host's headless desktop, or an X server). Tests and
benches read the markers back out of what was streamed: the picture, not a frame count, proves what was sent.
The window follows the monitor's size (a full-screen window is resized with it). The grey is a clear and only
the marker's rows are uploaded, so that the program costs little beside the compositor on a machine that renders
on its CPU.

With ``--keys`` the marker's id is instead the number of key presses and releases the window has received
(``bench input``: the first picture that shows a key is its photon). With ``--tone HZ`` it also plays a sine of
that pitch (GStreamer into PipeWire: the desktop's own sink), and with ``--band LUMA`` paints the bottom quarter of
its picture that grey, so that two desktops' streams tell apart. With ``--events PATH`` it writes what it received
as JSON lines: keys (pyglet's names), buttons and where they were pressed, wheel steps and pointer positions (pixels
from the top left), and its size whenever it changes, each with its time on the monotonic clock.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import IO

import numpy as np
import pyglet
from pyglet import gl

from pyrofling.core import frame_marker


def play(hz: float) -> None:
    import gi

    gi.require_version("Gst", "1.0")
    from gi.repository import Gst

    Gst.init(None)
    tone = Gst.parse_launch(
        f"audiotestsrc wave=sine freq={hz} volume=0.4 is-live=true ! audioconvert ! audioresample ! pipewiresink"
    )
    tone.set_state(Gst.State.PLAYING)
    play.pipeline = tone  # type: ignore[attr-defined]  # kept playing while the program runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fps", type=float, default=60.0)
    parser.add_argument("--events", help="write what the window received here, as JSON lines")
    parser.add_argument("--tone", type=float, help="play a sine of this many Hz")
    parser.add_argument("--band", type=int, help="paint the bottom quarter this grey (0..255)")
    parser.add_argument("--keys", action="store_true", help="the marker counts key presses and releases, not frames")
    args = parser.parse_args()
    if args.tone:
        play(args.tone)
    window = pyglet.window.Window(fullscreen=True, vsync=False, caption="marker window")
    # The compositor resizes a full-screen window with its monitor; pyglet's X11 window ignores the new size while
    # it thinks itself full-screen, so it is told otherwise (the window manager keeps it full-screen).
    window._fullscreen = False
    events: IO[str] | None = open(args.events, "w", buffering=1) if args.events else None  # noqa: SIM115
    count = 0
    keys = 0  # presses and releases received

    def say(**what: object) -> None:
        if events is not None:
            events.write(json.dumps({**what, "t": time.monotonic()}) + "\n")

    def top(y: float) -> int:
        return round(window.height - 1 - y)

    @window.event
    def on_key_press(symbol: int, _modifiers: int) -> None:
        nonlocal keys
        keys += 1
        say(key=pyglet.window.key.symbol_string(symbol), down=True)

    @window.event
    def on_key_release(symbol: int, _modifiers: int) -> None:
        nonlocal keys
        keys += 1
        say(key=pyglet.window.key.symbol_string(symbol), down=False)

    @window.event
    def on_mouse_press(x: float, y: float, button: int, _modifiers: int) -> None:
        say(button=button, down=True, x=round(x), y=top(y))

    @window.event
    def on_mouse_release(x: float, y: float, button: int, _modifiers: int) -> None:
        say(button=button, down=False, x=round(x), y=top(y))

    @window.event
    def on_mouse_scroll(_x: float, _y: float, scroll_x: float, scroll_y: float) -> None:
        say(scroll=[scroll_x, scroll_y])

    @window.event
    def on_mouse_motion(x: float, y: float, _dx: float, _dy: float) -> None:
        say(motion=[round(x), top(y)])

    @window.event
    def on_resize(width: int, height: int) -> None:
        say(size=[width, height])

    def clear(grey: int, rows: int | None = None) -> None:
        """Clear the window (or its bottom ``rows``) to a grey: the GPU's work, with nothing uploaded."""
        if rows is not None:
            gl.glEnable(gl.GL_SCISSOR_TEST)
            gl.glScissor(0, 0, window.width, rows)
        gl.glClearColor(grey / 255, grey / 255, grey / 255, 1.0)
        gl.glClear(gl.GL_COLOR_BUFFER_BIT)
        gl.glDisable(gl.GL_SCISSOR_TEST)

    def draw(_dt: float) -> None:
        nonlocal count
        count += 1
        width, height = window.width, window.height
        grey = 64 + (count * 7) % 128
        window.switch_to()
        clear(grey)
        if args.band is not None:
            clear(args.band, height // 4)
        layout = frame_marker.layout_for(width)
        if layout is not None:  # only the marker's rows are uploaded
            strip = np.full((layout.height, width), grey, np.uint8)
            now_us = (time.monotonic_ns() // 1000) & ((1 << 48) - 1)
            stamp = frame_marker.FrameStamp(keys if args.keys else count, now_us)
            frame_marker.paint(strip, stamp, layout)
            rgb = np.repeat(strip[:, :, None], 3, axis=2)
            image = pyglet.image.ImageData(width, layout.height, "RGB", rgb.tobytes(), pitch=-3 * width)  # top down
            image.blit(0, height - layout.height)
        window.flip()

    pyglet.clock.schedule_interval(draw, 1.0 / args.fps)
    pyglet.app.run(None)


if __name__ == "__main__":
    main()
