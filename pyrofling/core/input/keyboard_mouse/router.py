"""The host's keyboard and mouse (protocol.md §7.11); pure: who may type (one owner at a time), and the events
that take the virtual keyboard, mouse and pointer from what they show to what the accepted state says."""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, replace

from pyrofling.core.input.keyboard_mouse.codes import (
    KEY_HOME,
    KEY_LEFTALT,
    KEY_LEFTCTRL,
    KEY_RIGHTALT,
    KEY_RIGHTCTRL,
    MOUSE_BUTTONS,
    as_i32,
)
from pyrofling.core.input.pad.state import (
    ABS_X,
    ABS_Y,
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
from pyrofling.wire import InputFlags, InputState


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
        dx, dy, wheel, hwheel = (as_i32(new - old) for new, old in zip(totals, peer.totals, strict=True))
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
