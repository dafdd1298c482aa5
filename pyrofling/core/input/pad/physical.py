"""Reading a physical pad: Linux input events (evdev codes, no evdev import here) → :class:`PadState`.

Mapped as the reference maps an SDL gamepad (protocol.md §2.3, §7.6): sticks ``int16(32767·x)``, triggers
``uint8(255·x)``, the d-pad as a hat.  :func:`choose_pad` picks the first real pad and never
pyrofling's own virtual pad (a host and viewer on one machine would otherwise feed each other).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pyrofling.core.input.pad.state import (
    ABS_BRAKE,
    ABS_GAS,
    ABS_HAT0X,
    ABS_HAT0Y,
    ABS_RX,
    ABS_RY,
    ABS_RZ,
    ABS_X,
    ABS_Y,
    ABS_Z,
    BTN_DPAD_DOWN,
    BTN_DPAD_LEFT,
    BTN_DPAD_RIGHT,
    BTN_DPAD_UP,
    BTN_EAST,
    BTN_MODE,
    BTN_NORTH,
    BTN_SELECT,
    BTN_SOUTH,
    BTN_START,
    BTN_THUMBL,
    BTN_THUMBR,
    BTN_TL,
    BTN_TL2,
    BTN_TR,
    BTN_TR2,
    BTN_WEST,
    EV_ABS,
    EV_KEY,
    EV_SYN,
    NEUTRAL,
    STICK_MAX,
    SYN_DROPPED,
    SYN_REPORT,
    TRIGGER_MAX,
    VIRTUAL_PAD_PRODUCT,
    VIRTUAL_PAD_VENDOR,
    PadState,
)
from pyrofling.wire import GamepadButton


@dataclass(frozen=True, slots=True)
class AxisInfo:
    """An absolute axis as the kernel describes it (evdev's AbsInfo)."""

    minimum: int
    maximum: int
    flat: int = 0  # dead zone around the centre, in device units


def stick_value(raw: int, info: AxisInfo) -> int:
    """A stick axis in [-32767, 32767]: ``int16(32767·x)`` with x in [-1, 1], as the reference does."""
    span = info.maximum - info.minimum
    if span <= 0:
        return 0
    centre = (info.maximum + info.minimum) / 2
    if abs(raw - centre) <= info.flat:
        return 0
    x = max(-1.0, min(1.0, 2.0 * (raw - info.minimum) / span - 1.0))
    return int(STICK_MAX * x)  # truncates toward zero, like the C cast


def trigger_value(raw: int, info: AxisInfo) -> int:
    """A trigger in [0, 255]: ``uint8(255·x)`` with x in [0, 1]."""
    span = info.maximum - info.minimum
    if span <= 0:
        return 0
    x = max(0.0, min(1.0, (raw - info.minimum) / span))
    return int(TRIGGER_MAX * x)


def hat_value(raw: int) -> int:
    return (raw > 0) - (raw < 0)


class FaceLayout(enum.Enum):
    """Which codes a driver uses for the west and north face buttons.

    The kernel's names say BTN_NORTH (0x133) is the top button, but xpad (Xbox pads, and most
    others) reports its *left* X button as 0x133 (BTN_X) and its top Y button as 0x134.  Drivers
    written to the kernel's gamepad document (hid-playstation, hid-nintendo) report by position.
    The virtual pad writes the xpad way (the reference's deliberate swap, which Steam expects), so
    reading it back round-trips.
    """

    XPAD = "xpad"
    POSITIONAL = "positional"


#: Vendors whose Linux drivers report face buttons by position (Sony, Nintendo).
POSITIONAL_VENDORS = frozenset({0x054C, 0x057E})


def face_layout_for(vendor: int) -> FaceLayout:
    return FaceLayout.POSITIONAL if vendor in POSITIONAL_VENDORS else FaceLayout.XPAD


_COMMON_BUTTONS = {
    BTN_SOUTH: GamepadButton.SOUTH,
    BTN_EAST: GamepadButton.EAST,
    BTN_TL: GamepadButton.TL,
    BTN_TR: GamepadButton.TR,
    BTN_THUMBL: GamepadButton.THUMB_L,
    BTN_THUMBR: GamepadButton.THUMB_R,
    BTN_START: GamepadButton.START,
    BTN_SELECT: GamepadButton.SELECT,
    BTN_MODE: GamepadButton.MODE,
}
BUTTON_BITS: dict[FaceLayout, dict[int, GamepadButton]] = {
    FaceLayout.XPAD: {**_COMMON_BUTTONS, BTN_NORTH: GamepadButton.WEST, BTN_WEST: GamepadButton.NORTH},
    FaceLayout.POSITIONAL: {**_COMMON_BUTTONS, BTN_NORTH: GamepadButton.NORTH, BTN_WEST: GamepadButton.WEST},
}
STICK_AXES = {ABS_X: "lx", ABS_Y: "ly", ABS_RX: "rx", ABS_RY: "ry"}
TRIGGER_AXES = {ABS_Z: "lz", ABS_RZ: "rz", ABS_BRAKE: "lz", ABS_GAS: "rz"}
HAT_AXES = {ABS_HAT0X: "hat_x", ABS_HAT0Y: "hat_y"}
DPAD_BUTTONS = {BTN_DPAD_UP: ("hat_y", -1), BTN_DPAD_DOWN: ("hat_y", 1), BTN_DPAD_LEFT: ("hat_x", -1),
                BTN_DPAD_RIGHT: ("hat_x", 1)}  # fmt: skip
DIGITAL_TRIGGERS = {BTN_TL2: "lz", BTN_TR2: "rz"}


class EvdevMapper:
    """Accumulates one device's events; :meth:`feed` returns the new state at each SYN_REPORT.

    After a SYN_DROPPED the kernel's queue overflowed: the mapper ignores events up to the next
    SYN_REPORT, then sets :attr:`needs_resync` and the caller re-reads the whole device
    (:meth:`resync`), as libevdev does.
    """

    def __init__(self, axes: Mapping[int, AxisInfo], layout: FaceLayout = FaceLayout.XPAD) -> None:
        self.axes = dict(axes)
        self.layout = layout
        self._bits = BUTTON_BITS[layout]
        self._buttons = 0
        self._values: dict[str, int] = {}
        self._dpad: set[int] = set()
        self._digital: set[int] = set()
        self._dropping = False
        self.state = NEUTRAL
        self.needs_resync = False
        self.drops = 0

    def feed(self, ev_type: int, code: int, value: int) -> PadState | None:
        if ev_type == EV_SYN:
            if code == SYN_DROPPED:
                self._dropping = True
                self.drops += 1
                return None
            if code == SYN_REPORT:
                if self._dropping:
                    self._dropping = False
                    self.needs_resync = True
                    return None
                self.state = self._build()
                return self.state
            return None
        if self._dropping:
            return None
        if ev_type == EV_KEY:
            self._key(code, value != 0)
        elif ev_type == EV_ABS:
            self._abs(code, value)
        return None

    def resync(self, keys: Iterable[int], abs_values: Mapping[int, int]) -> PadState:
        """Replace everything with a full read of the device (active keys, current axis values)."""
        self._buttons = 0
        self._values = {}
        self._dpad = set()
        self._digital = set()
        self._dropping = False
        self.needs_resync = False
        for code in keys:
            self._key(code, True)
        for code, value in abs_values.items():
            self._abs(code, value)
        self.state = self._build()
        return self.state

    def _key(self, code: int, down: bool) -> None:
        bit = self._bits.get(code)
        if bit is not None:
            self._buttons = self._buttons | bit if down else self._buttons & ~bit
        elif code in DPAD_BUTTONS:
            (self._dpad.add if down else self._dpad.discard)(code)
        elif code in DIGITAL_TRIGGERS:
            (self._digital.add if down else self._digital.discard)(code)

    def _abs(self, code: int, value: int) -> None:
        info = self.axes.get(code)
        if code in HAT_AXES:
            self._values[HAT_AXES[code]] = hat_value(value)
        elif info is None:
            return
        elif code in STICK_AXES:
            self._values[STICK_AXES[code]] = stick_value(value, info)
        elif code in TRIGGER_AXES:
            self._values[TRIGGER_AXES[code]] = trigger_value(value, info)

    def _build(self) -> PadState:
        v = dict(self._values)
        for code in self._dpad:
            name, sign = DPAD_BUTTONS[code]
            v[name] = v.get(name, 0) + sign
        for name in ("hat_x", "hat_y"):
            if name in v:
                v[name] = hat_value(v[name])
        for code in self._digital:
            v[DIGITAL_TRIGGERS[code]] = TRIGGER_MAX  # a pad with on/off triggers
        return PadState(buttons=self._buttons, **v)


@dataclass(frozen=True, slots=True)
class PadCandidate:
    """What :func:`choose_pad` needs to know of an input device."""

    path: str
    name: str
    vendor: int
    product: int
    keys: frozenset[int]
    axes: frozenset[int]


def is_own_virtual_pad(vendor: int, product: int) -> bool:
    return vendor == VIRTUAL_PAD_VENDOR and product == VIRTUAL_PAD_PRODUCT


def is_gamepad(c: PadCandidate) -> bool:
    """A pad has a south face button and a left stick (keyboards, mice and joysticks do not both)."""
    return BTN_SOUTH in c.keys and {ABS_X, ABS_Y} <= c.axes


def choose_pad(candidates: Iterable[PadCandidate]) -> PadCandidate | None:
    """The first real gamepad in device order (event0, event1, … event10), never our own virtual pad."""
    pads = [c for c in candidates if is_gamepad(c) and not is_own_virtual_pad(c.vendor, c.product)]
    return min(pads, key=lambda c: _natural_key(c.path), default=None)


def _natural_key(path: str) -> tuple[str, int]:
    m = re.search(r"(\d+)$", path)
    return (path[: m.start()], int(m.group(1))) if m else (path, -1)
