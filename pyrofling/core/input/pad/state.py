"""A gamepad's state in GAMEPAD_STATE units (protocol.md §2.3), and the Linux input codes the core speaks.

The codes are linux/input-event-codes.h's, written out so the pure core needs no evdev import.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyrofling.wire import GamepadButton, GamepadState

# --------------------------------------------------------------------------------------------
# Linux input codes (linux/input-event-codes.h), so the pure core needs no evdev import
# --------------------------------------------------------------------------------------------

EV_SYN = 0x00
EV_KEY = 0x01
EV_REL = 0x02
EV_ABS = 0x03
EV_FF = 0x15
SYN_REPORT = 0
SYN_DROPPED = 3

BTN_SOUTH = 0x130  # BTN_A
BTN_EAST = 0x131  # BTN_B
BTN_C = 0x132
BTN_NORTH = 0x133  # = BTN_X: the *west* button on xpad-style pads (see FaceLayout)
BTN_WEST = 0x134  # = BTN_Y
BTN_TL = 0x136
BTN_TR = 0x137
BTN_TL2 = 0x138
BTN_TR2 = 0x139
BTN_SELECT = 0x13A
BTN_START = 0x13B
BTN_MODE = 0x13C
BTN_THUMBL = 0x13D
BTN_THUMBR = 0x13E
BTN_DPAD_UP = 0x220
BTN_DPAD_DOWN = 0x221
BTN_DPAD_LEFT = 0x222
BTN_DPAD_RIGHT = 0x223

ABS_X = 0x00
ABS_Y = 0x01
ABS_Z = 0x02
ABS_RX = 0x03
ABS_RY = 0x04
ABS_RZ = 0x05
ABS_GAS = 0x09
ABS_BRAKE = 0x0A
ABS_HAT0X = 0x10
ABS_HAT0Y = 0x11

REL_X = 0x00
REL_Y = 0x01
REL_HWHEEL = 0x06
REL_WHEEL = 0x08

BTN_LEFT = 0x110
BTN_RIGHT = 0x111
BTN_MIDDLE = 0x112
BTN_SIDE = 0x113
BTN_EXTRA = 0x114

FF_RUMBLE = 0x50
FF_GAIN = 0x60

BUS_USB = 0x03

#: pyrofling's (and PyroFling's) virtual pad, which a client must never read back.
VIRTUAL_PAD_VENDOR = 0x8998
VIRTUAL_PAD_PRODUCT = 0xFFEE
VIRTUAL_PAD_NAME = "PyroFling virtual gamepad"

STICK_MAX = 32767
TRIGGER_MAX = 255

Event = tuple[int, int, int]  # (type, code, value), as written to uinput


# --------------------------------------------------------------------------------------------
# The state
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PadState:
    """One gamepad's state, in GAMEPAD_STATE units (protocol.md §2.3), without the sequence."""

    buttons: int = 0
    lx: int = 0
    ly: int = 0
    rx: int = 0
    ry: int = 0
    lz: int = 0
    rz: int = 0
    hat_x: int = 0
    hat_y: int = 0

    def message(self, seq: int) -> GamepadState:
        return GamepadState(
            seq & 0xFFFF,
            self.buttons & 0xFFFF,
            self.lx,
            self.ly,
            self.rx,
            self.ry,
            self.lz,
            self.rz,
            self.hat_x,
            self.hat_y,
        )

    @classmethod
    def of(cls, msg: GamepadState) -> PadState:
        return cls(msg.buttons, msg.lx, msg.ly, msg.rx, msg.ry, msg.lz, msg.rz, msg.hat_x, msg.hat_y)

    def pressed(self, buttons: GamepadButton) -> bool:
        return self.buttons & buttons == buttons


NEUTRAL = PadState()

#: Held together, these take the pad over from its owner (as does Mode alone).
TAKEOVER_COMBO = GamepadButton.START | GamepadButton.SELECT | GamepadButton.TL | GamepadButton.TR


def wants_takeover(state: PadState) -> bool:
    return state.pressed(GamepadButton.MODE) or state.pressed(TAKEOVER_COMBO)


def merge(a: PadState, b: PadState) -> PadState:
    """Two inputs driving one pad (a physical pad and the keyboard): buttons OR'ed, the larger deflection wins."""

    def pick(x: int, y: int) -> int:
        return x if abs(x) >= abs(y) else y

    return PadState(
        a.buttons | b.buttons,
        pick(a.lx, b.lx),
        pick(a.ly, b.ly),
        pick(a.rx, b.rx),
        pick(a.ry, b.ry),
        max(a.lz, b.lz),
        max(a.rz, b.rz),
        pick(a.hat_x, b.hat_x),
        pick(a.hat_y, b.hat_y),
    )
