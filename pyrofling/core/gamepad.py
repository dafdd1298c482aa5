"""Gamepads, pure: reading a pad, sending its state, and who may drive the host's virtual pad.

Client side
    :class:`EvdevMapper` turns a Linux input device's events (evdev codes, no
    evdev import here) into a :class:`PadState`, as the reference maps an SDL
    gamepad (protocol.md §2.3, §7.6): sticks ``int16(32767·x)``, triggers
    ``uint8(255·x)``, the d-pad as a hat.  :func:`choose_pad` picks the first
    real pad and never pyrofling's own virtual pad (a host and viewer on one
    machine would otherwise feed each other).  :class:`KeyboardPad` is the
    viewer window's keyboard mapping.  :class:`GamepadSender` stamps states
    with the 16-bit sequence and decides when to send.

Host side
    :class:`GamepadRouter` applies the acceptance rules (sequence moving
    forward, single owner with take-over) and turns each accepted state into
    the uinput events the virtual pad must see: only what changed, then a
    sync (:func:`pad_events`).  The device description (USB bus, vendor
    0x8998, product 0xffee, codes and ranges, the deliberate X/Y swap) is
    :data:`VIRTUAL_PAD`.
"""

from __future__ import annotations

import enum
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pyrofling.seqnum import seq16_delta
from pyrofling.wire import GamepadButton, GamepadState

# --------------------------------------------------------------------------------------------
# Linux input codes (linux/input-event-codes.h), so the pure core needs no evdev import
# --------------------------------------------------------------------------------------------

EV_SYN = 0x00
EV_KEY = 0x01
EV_ABS = 0x03
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


# --------------------------------------------------------------------------------------------
# Reading a physical pad (evdev events → PadState)
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# The viewer window's keyboard
# --------------------------------------------------------------------------------------------

#: Key (pyglet's symbol name) → what it does.  Documented in the README and ``pyrofling view --help``.
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


# --------------------------------------------------------------------------------------------
# Sending
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SenderConfig:
    #: The reference sends every 4 ms whether or not anything changed: loss is healed by the next one.
    interval_s: float = 0.004
    #: Also send a change at once rather than at the next tick (saves half a tick on average)...
    send_on_change: bool = True
    #: ...but no closer than this to the previous send (a 1000 Hz pad would otherwise send at 1000 Hz).
    min_gap_s: float = 0.001


@dataclass(slots=True)
class SenderStats:
    sent: int = 0
    sent_on_change: int = 0


class GamepadSender:
    """Sequences states and decides when each goes out.  ``poll(state, now)`` → (seq, datagram) or None.

    The periodic sends keep their cadence (each due one interval after the previous due time, so
    a loop that wakes a little late still sends 250 a second); a change goes out in between.
    Call :meth:`poll` again at :meth:`next_timer`.
    """

    def __init__(self, config: SenderConfig | None = None, *, first_seq: int = 0) -> None:
        self.config = config or SenderConfig()
        self.seq = first_seq & 0xFFFF
        self.stats = SenderStats()
        self._last: PadState | None = None
        self._last_sent_s: float | None = None
        self._next_s: float | None = None
        self._change_waiting = False

    def poll(self, state: PadState, now: float) -> tuple[int, bytes] | None:
        cfg = self.config
        changed = state != self._last
        due = self._next_s is None or now >= self._next_s
        early = (
            changed and cfg.send_on_change and (self._last_sent_s is None or now - self._last_sent_s >= cfg.min_gap_s)
        )
        if not (due or early):
            self._change_waiting = changed and cfg.send_on_change
            return None
        if due:
            nxt = self._next_s
            behind = nxt is None or now - nxt >= cfg.interval_s  # stalled: start over, no catch-up burst
            self._next_s = now + cfg.interval_s if nxt is None or behind else nxt + cfg.interval_s
        else:
            self.stats.sent_on_change += 1
        seq = self.seq
        self.seq = (seq + 1) & 0xFFFF
        self._last = state
        self._last_sent_s = now
        self._change_waiting = False
        self.stats.sent += 1
        return seq, bytes(state.message(seq))

    def next_timer(self) -> float | None:
        if self._change_waiting and self._last_sent_s is not None and self._next_s is not None:
            return min(self._next_s, self._last_sent_s + self.config.min_gap_s)
        return self._next_s


# --------------------------------------------------------------------------------------------
# The host's virtual pad
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VirtualPadSpec:
    """The uinput device the host creates (the reference's, code for code)."""

    name: str
    bustype: int
    vendor: int
    product: int
    #: (GAMEPAD_STATE button bit, key code).  West→BTN_X and North→BTN_Y: the reference's deliberate
    #: swap (Steam Input reads pads the xpad way).  Mode is not forwarded: it only takes the pad over.
    keys: tuple[tuple[GamepadButton, int], ...]
    #: (PadState field, abs code, minimum, maximum).
    axes: tuple[tuple[str, int, int, int], ...]


VIRTUAL_PAD = VirtualPadSpec(
    name=VIRTUAL_PAD_NAME,
    bustype=BUS_USB,
    vendor=VIRTUAL_PAD_VENDOR,
    product=VIRTUAL_PAD_PRODUCT,
    keys=(
        (GamepadButton.SOUTH, BTN_SOUTH),
        (GamepadButton.EAST, BTN_EAST),
        (GamepadButton.WEST, BTN_NORTH),  # 0x133, BTN_X
        (GamepadButton.NORTH, BTN_WEST),  # 0x134, BTN_Y
        (GamepadButton.TL, BTN_TL),
        (GamepadButton.TR, BTN_TR),
        (GamepadButton.THUMB_L, BTN_THUMBL),
        (GamepadButton.THUMB_R, BTN_THUMBR),
        (GamepadButton.START, BTN_START),
        (GamepadButton.SELECT, BTN_SELECT),
    ),
    axes=(
        ("lx", ABS_X, -STICK_MAX, STICK_MAX),
        ("ly", ABS_Y, -STICK_MAX, STICK_MAX),
        ("rx", ABS_RX, -STICK_MAX, STICK_MAX),
        ("ry", ABS_RY, -STICK_MAX, STICK_MAX),
        ("lz", ABS_Z, 0, TRIGGER_MAX),
        ("rz", ABS_RZ, 0, TRIGGER_MAX),
        ("hat_x", ABS_HAT0X, -1, 1),
        ("hat_y", ABS_HAT0Y, -1, 1),
    ),
)


def pad_events(before: PadState, after: PadState, spec: VirtualPadSpec = VIRTUAL_PAD) -> list[Event]:
    """The events that take the virtual pad from ``before`` to ``after``: changes only, then SYN_REPORT."""
    events: list[Event] = []
    changed = before.buttons ^ after.buttons
    for bit, code in spec.keys:
        if changed & bit:
            events.append((EV_KEY, code, 1 if after.buttons & bit else 0))
    for name, code, lo, hi in spec.axes:
        old, new = getattr(before, name), getattr(after, name)
        if old != new:
            events.append((EV_ABS, code, max(lo, min(hi, new))))
    if events:
        events.append((EV_SYN, SYN_REPORT, 0))
    return events


class Verdict(enum.Enum):
    APPLIED = "applied"
    STALE = "stale_seq"  # older than, or the same as, the last state from that connection
    NOT_OWNER = "not_owner"  # someone else holds the pad and this state asks for no take-over


@dataclass(frozen=True, slots=True)
class PadUpdate:
    """An accepted state and the events it puts on the virtual pad (empty when nothing changed)."""

    conn_id: int | None  # None: the host released the pad (its owner left)
    seq: int | None
    state: PadState
    events: list[Event]
    took_over: bool = False


@dataclass(slots=True)
class RouterStats:
    applied: int = 0
    takeovers: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)


class GamepadRouter:
    """One virtual pad shared by every gamepad connection of a host.

    A state is applied when its sequence moves forward for its connection (a duplicate or an
    older, reordered state is dropped: the reference accepts an equal one, which changes nothing)
    and its sender owns the pad, nobody does, or it holds Mode or Start+Select+L1+R1.  The sender
    of an applied state becomes the owner.  A KICK asking for the gamepad clears ownership (as in
    the reference).  Unlike the reference, an owner that disconnects releases the pad: its
    buttons are let go rather than left held.
    """

    def __init__(self, spec: VirtualPadSpec = VIRTUAL_PAD) -> None:
        self.spec = spec
        self.owner: int | None = None
        self.applied = NEUTRAL
        self.stats = RouterStats()
        self._last_seq: dict[int, int] = {}

    def offer(self, conn_id: int, msg: GamepadState) -> tuple[Verdict, PadUpdate | None]:
        last = self._last_seq.get(conn_id)
        if last is not None and seq16_delta(msg.seq, last) <= 0:
            return self._count(Verdict.STALE), None
        self._last_seq[conn_id] = msg.seq
        state = PadState.of(msg)
        took_over = False
        if self.owner is not None and self.owner != conn_id:
            if not wants_takeover(state):
                return self._count(Verdict.NOT_OWNER), None
            took_over = True
            self.stats.takeovers += 1
        self.owner = conn_id
        events = pad_events(self.applied, state, self.spec)
        self.applied = state
        self.stats.applied += 1
        self._count(Verdict.APPLIED)
        return Verdict.APPLIED, PadUpdate(conn_id, msg.seq, state, events, took_over)

    def reset_ownership(self) -> None:
        """A viewer KICKed asking for the gamepad: the next sender owns the pad."""
        self.owner = None

    def connection_closed(self, conn_id: int) -> PadUpdate | None:
        """Forget a connection; if it owned the pad, let go of everything it held."""
        self._last_seq.pop(conn_id, None)
        if self.owner != conn_id:
            return None
        self.owner = None
        events = pad_events(self.applied, NEUTRAL, self.spec)
        self.applied = NEUTRAL
        return PadUpdate(None, None, NEUTRAL, events) if events else None

    def _count(self, verdict: Verdict) -> Verdict:
        self.stats.verdicts[verdict.value] += 1
        return verdict
