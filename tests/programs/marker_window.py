"""A program for the headless desktop's tests: a full-screen window whose picture is known and changes every frame.

It shows the frame marker (``pyrofling.core.frame_marker``: its frame id counting up from 1, its time on the
monotonic clock) along the top and a grey that steps with the frame below it, ``--fps`` times a second, through
OpenGL on whatever display it is given (Xwayland in the host's headless desktop). The test reads the markers
back out of the host's recording: the picture, not a frame count, proves what was streamed.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyglet

from pyrofling.core import frame_marker


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fps", type=float, default=60.0)
    args = parser.parse_args()
    window = pyglet.window.Window(fullscreen=True, vsync=False, caption="marker window")
    width, height = window.width, window.height
    layout = frame_marker.layout_for(width)
    assert layout is not None
    luma = np.zeros((height, width), np.uint8)
    count = 0

    def draw(_dt: float) -> None:
        nonlocal count
        count += 1
        luma[:] = 64 + (count * 7) % 128
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
