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

import enum
from collections import Counter
from dataclasses import dataclass, replace

from pyrofling.core.gamepad.state import (
    ABS_X,
    ABS_Y,
    BTN_EXTRA,
    BTN_LEFT,
    BTN_MIDDLE,
    BTN_RIGHT,
    BTN_SIDE,
    EV_ABS,
    EV_KEY,
    EV_REL,
    EV_SYN,
    REL_HWHEEL,
    REL_WHEEL,
    REL_X,
    REL_Y,
    SYN_REPORT,
    Event,
)
from pyrofling.seqnum import seq16_delta
from pyrofling.wire import INPUT_KEY_CODES, InputFlags, InputState, key_bitmap

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


def _i32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


# --------------------------------------------------------------------------------------------
# The viewer's side
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SenderConfig:
    #: While anything is held, the state goes again this often (a lost release is repaired by the next one).
    refresh_s: float = 0.02


@dataclass(slots=True)
class SenderStats:
    sent: int = 0
    sent_on_change: int = 0


class InputSender:
    """The viewer's keyboard and mouse as INPUT_STATE messages: at once on every change, and every
    ``refresh_s`` while anything is held."""

    def __init__(self, config: SenderConfig | None = None) -> None:
        self.config = config or SenderConfig()
        self.keys: set[int] = set()
        self.buttons = 0
        self.dx_total = self.dy_total = self.wheel_total = self.hwheel_total = 0
        self.absolute: tuple[int, int] | None = None
        self.captured = False
        self.stats = SenderStats()
        self._seq = 0
        self._last_sent_s: float | None = None
        self._changed = False

    def key(self, code: int, down: bool) -> None:
        if not 0 < code < INPUT_KEY_CODES:
            return
        before = len(self.keys)
        (self.keys.add if down else self.keys.discard)(code)
        self._changed |= len(self.keys) != before

    def button(self, index: int, down: bool) -> None:
        if not 0 <= index < len(MOUSE_BUTTONS):
            return
        bit = 1 << index
        after = self.buttons | bit if down else self.buttons & ~bit
        self._changed |= after != self.buttons
        self.buttons = after

    def move(self, dx: int, dy: int) -> None:
        """Relative motion (pointer captured), in pixels of the viewer's screen."""
        if dx or dy:
            self.dx_total = _i32(self.dx_total + dx)
            self.dy_total = _i32(self.dy_total + dy)
            self._changed = True

    def scroll(self, vertical: int, horizontal: int = 0) -> None:
        if vertical or horizontal:
            self.wheel_total = _i32(self.wheel_total + vertical)
            self.hwheel_total = _i32(self.hwheel_total + horizontal)
            self._changed = True

    def point(self, x: float, y: float) -> None:
        """Where the pointer is over the picture, 0..1 each way (not captured)."""
        pos = (round(max(0.0, min(1.0, x)) * ABS_MAX), round(max(0.0, min(1.0, y)) * ABS_MAX))
        if pos != self.absolute:
            self.absolute = pos
            self._changed = True

    def capture(self, captured: bool) -> None:
        if captured != self.captured:
            self.captured = captured
            if captured:
                self.absolute = None
            self._changed = True

    def release_all(self) -> None:
        """The window lost focus, or the pointer was let go: nothing stays held."""
        if self.keys or self.buttons:
            self.keys.clear()
            self.buttons = 0
            self._changed = True

    @property
    def holding(self) -> bool:
        return bool(self.keys or self.buttons)

    def poll(self, now: float) -> InputState | None:
        """The message to send now, if any."""
        refresh = (
            self.holding and self._last_sent_s is not None and now - self._last_sent_s >= self.config.refresh_s - 1e-9
        )
        if not self._changed and not refresh:
            return None
        flags = InputFlags.CAPTURED if self.captured else InputFlags.NONE
        ax, ay = self.absolute or (0, 0)
        if self.absolute is not None and not self.captured:
            flags |= InputFlags.ABSOLUTE
        msg = InputState(
            self._seq,
            self.buttons,
            int(flags),
            key_bitmap(self.keys),
            self.dx_total,
            self.dy_total,
            self.wheel_total,
            self.hwheel_total,
            ax,
            ay,
        )
        self._seq = (self._seq + 1) & 0xFFFF
        self.stats.sent += 1
        self.stats.sent_on_change += self._changed
        self._changed = False
        self._last_sent_s = now
        return msg

    def next_timer(self) -> float | None:
        if self._changed:
            return 0.0
        if self.holding and self._last_sent_s is not None:
            return self._last_sent_s + self.config.refresh_s
        return None


# --------------------------------------------------------------------------------------------
# The host's side
# --------------------------------------------------------------------------------------------


class InputVerdict(enum.Enum):
    APPLIED = "applied"
    STALE = "stale_seq"
    NOT_OWNER = "not_owner"


@dataclass(frozen=True, slots=True)
class InputUpdate:
    """What an accepted state (or a release) writes: one report per device, each ending in SYN_REPORT (a
    device with nothing to do gets an empty list)."""

    conn_id: int | None  # None: the host let go (the owner left or went silent)
    keyboard: list[Event]
    mouse: list[Event]
    pointer: list[Event]
    #: This update's motion and wheel, and what is held after it (for games on the capture socket).
    dx: int = 0
    dy: int = 0
    wheel: int = 0
    hwheel: int = 0
    keys: frozenset[int] = frozenset()
    buttons: int = 0
    absolute: tuple[int, int] | None = None
    took_over: bool = False
    #: The INPUT_STATE's sequence number (None: the host let go).
    seq: int | None = None

    @property
    def empty(self) -> bool:
        return not (self.keyboard or self.mouse or self.pointer)

    def after(self, earlier: InputUpdate) -> InputUpdate:
        """This update for a reader that never got ``earlier``: what is held now, and both motions summed."""
        return replace(
            self,
            dx=earlier.dx + self.dx,
            dy=earlier.dy + self.dy,
            wheel=earlier.wheel + self.wheel,
            hwheel=earlier.hwheel + self.hwheel,
        )


@dataclass(slots=True)
class _Peer:
    seq: int | None = None
    totals: tuple[int, int, int, int] = (0, 0, 0, 0)
    last_s: float = 0.0


def wants_takeover(keys: frozenset[int]) -> bool:
    """Ctrl + Alt + Home takes the keyboard and mouse over (as Mode does the pad)."""
    ctrl = KEY_LEFTCTRL in keys or KEY_RIGHTCTRL in keys
    alt = KEY_LEFTALT in keys or KEY_RIGHTALT in keys
    return ctrl and alt and KEY_HOME in keys


def _report(events: list[Event]) -> list[Event]:
    return [*events, (EV_SYN, SYN_REPORT, 0)] if events else []


class InputRouter:
    """One virtual keyboard, mouse and pointer, driven by one connection at a time.

    A state is applied when its sequence moves forward for its connection and its connection owns the input,
    nobody does, or it holds Ctrl+Alt+Home.  Motion is the difference between running totals, so it
    accumulates exactly whatever was lost; a non-owner's totals are followed too, so taking over never jumps.
    Everything held is let go when the owner's connection ends, when it asks (a state with nothing held), and
    when it has held something without a state for ``timeout_s`` (a viewer refreshes every 20 ms while it
    holds anything).
    """

    def __init__(self, *, timeout_s: float = 0.5) -> None:
        self.timeout_s = timeout_s
        self.owner: int | None = None
        self.keys: frozenset[int] = frozenset()
        self.buttons = 0
        self.absolute: tuple[int, int] | None = None
        self.applied = 0
        self.takeovers = 0
        self.timeouts = 0
        self.verdicts: Counter[str] = Counter()
        self._peers: dict[int, _Peer] = {}
        self._owner_last_s: float | None = None

    def offer(self, conn_id: int, msg: InputState, now: float) -> tuple[InputVerdict, InputUpdate | None]:
        peer = self._peers.setdefault(conn_id, _Peer())
        if peer.seq is not None and seq16_delta(msg.seq, peer.seq) <= 0:
            return self._count(InputVerdict.STALE), None
        peer.seq, peer.last_s = msg.seq, now
        totals = (msg.dx_total, msg.dy_total, msg.wheel_total, msg.hwheel_total)
        dx, dy, wheel, hwheel = (_i32(new - old) for new, old in zip(totals, peer.totals, strict=True))
        peer.totals = totals
        keys = msg.held()
        took_over = False
        if self.owner is not None and self.owner != conn_id:
            if not wants_takeover(keys):
                return self._count(InputVerdict.NOT_OWNER), None
            took_over = True
            self.takeovers += 1
        self.owner = conn_id
        self._owner_last_s = now
        absolute = (msg.abs_x, msg.abs_y) if msg.flags & InputFlags.ABSOLUTE else None
        update = self._to(keys, msg.buttons & 0x1F, dx, dy, wheel, hwheel, absolute, conn_id, took_over, msg.seq)
        self.applied += 1
        self._count(InputVerdict.APPLIED)
        return InputVerdict.APPLIED, update

    def _to(
        self,
        keys: frozenset[int],
        buttons: int,
        dx: int,
        dy: int,
        wheel: int,
        hwheel: int,
        absolute: tuple[int, int] | None,
        conn_id: int | None,
        took_over: bool = False,
        seq: int | None = None,
    ) -> InputUpdate:
        keyboard: list[Event] = [(EV_KEY, c, 0) for c in sorted(self.keys - keys)]
        keyboard += [(EV_KEY, c, 1) for c in sorted(keys - self.keys)]
        mouse: list[Event] = []
        changed = self.buttons ^ buttons
        for i, code in enumerate(MOUSE_BUTTONS):
            if changed >> i & 1:
                mouse.append((EV_KEY, code, buttons >> i & 1))
        for code, value in ((REL_X, dx), (REL_Y, dy), (REL_WHEEL, wheel), (REL_HWHEEL, hwheel)):
            if value:
                mouse.append((EV_REL, code, value))
        pointer: list[Event] = []
        if absolute is not None and absolute != self.absolute:
            pointer = [(EV_ABS, ABS_X, absolute[0]), (EV_ABS, ABS_Y, absolute[1])]
        self.keys, self.buttons = keys, buttons
        if absolute is not None:
            self.absolute = absolute
        return InputUpdate(
            conn_id,
            _report(keyboard),
            _report(mouse),
            _report(pointer),
            dx,
            dy,
            wheel,
            hwheel,
            keys,
            buttons,
            absolute,
            took_over,
            seq,
        )

    def release(self) -> InputUpdate | None:
        """Let go of every key and button (no owner afterwards); None when nothing was held."""
        self.owner = None
        self._owner_last_s = None
        if not self.keys and not self.buttons:
            return None
        return self._to(frozenset(), 0, 0, 0, 0, 0, None, None)

    def reset_ownership(self) -> None:
        """A viewer KICKed asking for the keyboard and mouse: the next sender owns them (held input let go first
        by the caller, :meth:`release`)."""
        self.owner = None

    def connection_closed(self, conn_id: int) -> InputUpdate | None:
        self._peers.pop(conn_id, None)
        if self.owner != conn_id:
            return None
        return self.release()

    def next_timer(self) -> float | None:
        if self._owner_last_s is None or not (self.keys or self.buttons):
            return None
        return self._owner_last_s + self.timeout_s

    def handle_timer(self, now: float) -> InputUpdate | None:
        due = self.next_timer()
        if due is None or now < due:
            return None
        self.timeouts += 1
        return self.release()

    def _count(self, verdict: InputVerdict) -> InputVerdict:
        self.verdicts[verdict.value] += 1
        return verdict

    def summary(self) -> dict[str, object]:
        return {
            "states_applied": self.applied,
            "takeovers": self.takeovers,
            "timeouts": self.timeouts,
            "owner": self.owner,
            "verdicts": dict(self.verdicts),
        }


__all__ = [
    "ABS_MAX",
    "INPUT_HELP",
    "KEYBOARD_CODES",
    "MOUSE_BUTTONS",
    "WINDOW_KEYS",
    "InputRouter",
    "InputSender",
    "InputUpdate",
    "InputVerdict",
    "SenderConfig",
]
