"""Keyboard and mouse (KEYBOARD_MOUSE, protocol.md §7.11); pure.

The viewer sends a *state*, not events: the keys and buttons held, and the
pointer's motion and wheel as running totals since the connection began.  A lost
datagram therefore loses no motion (the next total has it) and leaves no key
held (the next state lets it go).  :class:`InputSender` is the viewer's side;
:class:`InputRouter` the host's: who may type (one owner at a time), and the
events that take the virtual keyboard, mouse and pointer from what they show to
what the state says — changes only, each device's report ending in SYN_REPORT.

Key codes are Linux's (linux/input-event-codes.h); :data:`WINDOW_KEYS` maps the
viewer window's key names (pyglet's) to them.
"""

from __future__ import annotations

from pyrofling.core.input.keyboard_mouse.codes import (
    ABS_MAX,
    INPUT_HELP,
    KEYBOARD_CODES,
    MOUSE_BUTTONS,
    WINDOW_KEYS,
)
from pyrofling.core.input.keyboard_mouse.router import InputRouter, InputUpdate, InputVerdict, wants_takeover
from pyrofling.core.input.keyboard_mouse.sender import InputSender, InputSenderConfig, InputSenderStats

__all__ = [
    "ABS_MAX",
    "INPUT_HELP",
    "KEYBOARD_CODES",
    "MOUSE_BUTTONS",
    "WINDOW_KEYS",
    "InputRouter",
    "InputSender",
    "InputSenderConfig",
    "InputSenderStats",
    "InputUpdate",
    "InputVerdict",
    "wants_takeover",
]
