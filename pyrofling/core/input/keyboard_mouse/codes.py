"""Keyboard and mouse codes both sides use: Linux's key and button codes (linux/input-event-codes.h), the
viewer window's key names mapped to them, and the keys that take over or let the pointer go."""

from __future__ import annotations

from pyrofling.core.input.pad.state import BTN_EXTRA, BTN_LEFT, BTN_MIDDLE, BTN_RIGHT, BTN_SIDE

ABS_MAX = 65535
#: INPUT_STATE button bit → Linux button code.
MOUSE_BUTTONS: tuple[int, ...] = (BTN_LEFT, BTN_RIGHT, BTN_MIDDLE, BTN_SIDE, BTN_EXTRA)

KEY_LEFTCTRL = 29
KEY_LEFTALT = 56
KEY_HOME = 102
KEY_RIGHTCTRL = 97
KEY_RIGHTALT = 100

#: The viewer window's key names (pyglet's ``key.symbol_string``) → Linux key codes.
WINDOW_KEYS: dict[str, int] = {
    "ESCAPE": 1,
    **{f"_{d}": d + 1 for d in range(1, 10)},  # _1.._9 → 2..10
    "_0": 11,
    "MINUS": 12,
    "EQUAL": 13,
    "BACKSPACE": 14,
    "TAB": 15,
    **dict(zip("QWERTYUIOP", range(16, 26), strict=True)),
    "BRACKETLEFT": 26,
    "BRACKETRIGHT": 27,
    "ENTER": 28,
    "RETURN": 28,
    "LCTRL": KEY_LEFTCTRL,
    **dict(zip("ASDFGHJKL", range(30, 39), strict=True)),
    "SEMICOLON": 39,
    "APOSTROPHE": 40,
    "GRAVE": 41,
    "QUOTELEFT": 41,
    "LSHIFT": 42,
    "BACKSLASH": 43,
    **dict(zip("ZXCVBNM", range(44, 51), strict=True)),
    "COMMA": 51,
    "PERIOD": 52,
    "SLASH": 53,
    "RSHIFT": 54,
    "NUM_MULTIPLY": 55,
    "LALT": KEY_LEFTALT,
    "SPACE": 57,
    "CAPSLOCK": 58,
    **{f"F{i}": 58 + i for i in range(1, 11)},  # F1..F10 → 59..68
    "NUMLOCK": 69,
    "SCROLLLOCK": 70,
    "NUM_7": 71,
    "NUM_8": 72,
    "NUM_9": 73,
    "NUM_SUBTRACT": 74,
    "NUM_4": 75,
    "NUM_5": 76,
    "NUM_6": 77,
    "NUM_ADD": 78,
    "NUM_1": 79,
    "NUM_2": 80,
    "NUM_3": 81,
    "NUM_0": 82,
    "NUM_DECIMAL": 83,
    "F11": 87,
    "F12": 88,
    "NUM_ENTER": 96,
    "RCTRL": KEY_RIGHTCTRL,
    "NUM_DIVIDE": 98,
    "SYSREQ": 99,
    "PRINT": 99,
    "RALT": KEY_RIGHTALT,
    "HOME": KEY_HOME,
    "UP": 103,
    "PAGEUP": 104,
    "LEFT": 105,
    "RIGHT": 106,
    "END": 107,
    "DOWN": 108,
    "PAGEDOWN": 109,
    "INSERT": 110,
    "DELETE": 111,
    "PAUSE": 119,
    "LMETA": 125,
    "LWINDOWS": 125,
    "LCOMMAND": 125,
    "RMETA": 126,
    "RWINDOWS": 126,
    "RCOMMAND": 126,
    "MENU": 139,
}

#: Codes a virtual keyboard offers (every code the window can send, and the rest of the standard range).
KEYBOARD_CODES: tuple[int, ...] = tuple(range(1, 249))

INPUT_HELP = (
    "Keyboard and mouse (a host that offers them): click the picture to capture the pointer (relative motion, "
    "buttons, wheel go to the game); Ctrl+Alt+Z lets it go; while captured the window's own keys need Ctrl+Alt "
    "(Ctrl+Alt+V statistics, Ctrl+Alt+F full screen, Ctrl+Alt+Q quit)"
)


def as_i32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x
