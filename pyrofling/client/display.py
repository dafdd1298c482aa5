"""Whether a window can open here: a display named in the environment, and an X server answering on it."""

from __future__ import annotations

import os


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
