"""The viewer window's keyboard as a pad (the keys are documented in the README and ``view --help``)."""

from __future__ import annotations

from collections import Counter

from pyrofling.core.input.pad.state import NEUTRAL, STICK_MAX, TRIGGER_MAX, PadState
from pyrofling.wire import GamepadButton

KEY_BUTTONS: dict[str, GamepadButton] = {
    "Z": GamepadButton.SOUTH,
    "SPACE": GamepadButton.SOUTH,
    "X": GamepadButton.EAST,
    "C": GamepadButton.WEST,
    "Y": GamepadButton.NORTH,
    "Q": GamepadButton.TL,
    "E": GamepadButton.TR,
    "G": GamepadButton.THUMB_L,
    "H": GamepadButton.THUMB_R,
    "ENTER": GamepadButton.START,
    "BACKSPACE": GamepadButton.SELECT,
    "HOME": GamepadButton.MODE,
}
#: Keys that push a stick to full deflection (stick Y grows downward, as on a pad).
KEY_STICKS: dict[str, tuple[str, int]] = {
    "W": ("ly", -STICK_MAX),
    "S": ("ly", STICK_MAX),
    "A": ("lx", -STICK_MAX),
    "D": ("lx", STICK_MAX),
    "I": ("ry", -STICK_MAX),
    "K": ("ry", STICK_MAX),
    "J": ("rx", -STICK_MAX),
    "L": ("rx", STICK_MAX),
    "UP": ("hat_y", -1),
    "DOWN": ("hat_y", 1),
    "LEFT": ("hat_x", -1),
    "RIGHT": ("hat_x", 1),
}
KEY_TRIGGERS: dict[str, str] = {"_1": "lz", "_3": "rz"}

KEYBOARD_HELP = (
    "Keyboard pad: WASD left stick, IJKL right stick, arrows d-pad, Z/Space A (south), X B (east), "
    "C X (west), Y Y (north), Q/E shoulders, 1/3 triggers, G/H stick clicks, Enter Start, "
    "Backspace Select, Home Mode (takes the pad over)"
)


class KeyboardPad:
    """Keys held in the viewer window, as a pad.  Opposite keys held together cancel."""

    def __init__(self) -> None:
        self._held: set[str] = set()

    def handles(self, key: str) -> bool:
        return key in KEY_BUTTONS or key in KEY_STICKS or key in KEY_TRIGGERS

    def press(self, key: str) -> PadState | None:
        """Returns the new state when the key is part of the mapping (None: not ours)."""
        if not self.handles(key):
            return None
        self._held.add(key)
        return self.state

    def release(self, key: str) -> PadState | None:
        if not self.handles(key):
            return None
        self._held.discard(key)
        return self.state

    def release_all(self) -> PadState:
        """The window lost focus: a key released elsewhere must not stay held here."""
        self._held.clear()
        return NEUTRAL

    @property
    def state(self) -> PadState:
        buttons = 0
        axes: Counter[str] = Counter()
        for key in self._held:
            if key in KEY_BUTTONS:
                buttons |= KEY_BUTTONS[key]
            elif key in KEY_STICKS:
                name, value = KEY_STICKS[key]
                axes[name] += value
            elif key in KEY_TRIGGERS:
                axes[KEY_TRIGGERS[key]] = TRIGGER_MAX
        return PadState(buttons=buttons, **axes)
