"""A program for the headless desktop's tests: a full-screen window whose picture is known and changes every frame.

It shows the frame marker (``pyrofling.core.frame_marker``: its frame id counting up from 1, its time on the
monotonic clock) along the top and a grey that steps with the frame below it, ``--fps`` times a second, through
OpenGL on whatever display it is given (Xwayland in the host's headless desktop). The test reads the markers
back out of the host's recording: the picture, not a frame count, proves what was streamed. The window follows
the monitor's size (a full-screen window is resized with it).

With ``--tone HZ`` it also plays a sine of that pitch (GStreamer into PipeWire: the desktop's own sink), and with
``--band LUMA`` paints the bottom quarter of its picture that grey, so that two desktops' streams tell apart.
With ``--events PATH`` it writes what it received as JSON lines: keys (pyglet's names), buttons and where they
were pressed, wheel steps and pointer positions (pixels from the top left), and its size whenever it changes.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import IO

import numpy as np
import pyglet

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
    args = parser.parse_args()
    if args.tone:
        play(args.tone)
    window = pyglet.window.Window(fullscreen=True, vsync=False, caption="marker window")
    # The compositor resizes a full-screen window with its monitor; pyglet's X11 window ignores the new size while
    # it thinks itself full-screen, so it is told otherwise (the window manager keeps it full-screen).
    window._fullscreen = False
    events: IO[str] | None = open(args.events, "w", buffering=1) if args.events else None  # noqa: SIM115
    count = 0

    def say(**what: object) -> None:
        if events is not None:
            events.write(json.dumps(what) + "\n")

    def top(y: float) -> int:
        return round(window.height - 1 - y)

    @window.event
    def on_key_press(symbol: int, _modifiers: int) -> None:
        say(key=pyglet.window.key.symbol_string(symbol), down=True)

    @window.event
    def on_key_release(symbol: int, _modifiers: int) -> None:
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

    def draw(_dt: float) -> None:
        nonlocal count
        count += 1
        width, height = window.width, window.height
        layout = frame_marker.layout_for(width)
        luma = np.full((height, width), 64 + (count * 7) % 128, np.uint8)
        if args.band is not None:
            luma[height * 3 // 4 :] = args.band
        if layout is not None:
            stamp = frame_marker.FrameStamp(count, (time.monotonic_ns() // 1000) & ((1 << 48) - 1))
            frame_marker.paint(luma, stamp, layout)
        window.switch_to()
        rgb = np.repeat(luma[:, :, None], 3, axis=2)
        image = pyglet.image.ImageData(width, height, "RGB", rgb.tobytes(), pitch=-3 * width)  # rows top down
        image.blit(0, 0)
        window.flip()

    pyglet.clock.schedule_interval(draw, 1.0 / args.fps)
    pyglet.app.run(None)


if __name__ == "__main__":
    main()
