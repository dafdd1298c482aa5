"""The host's virtual pad: who may drive it, and the uinput events each accepted state makes.

:class:`GamepadRouter` applies the acceptance rules (sequence moving forward, single owner with
take-over) and turns each accepted state into the events the virtual pad must see: only what changed,
then a sync (:func:`pad_events`).  The device description (USB bus, vendor 0x8998, product 0xffee,
codes and ranges, the deliberate X/Y swap) is :data:`VIRTUAL_PAD`.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field

from pyrofling.core.input.pad.state import (
    ABS_HAT0X,
    ABS_HAT0Y,
    ABS_RX,
    ABS_RY,
    ABS_RZ,
    ABS_X,
    ABS_Y,
    ABS_Z,
    BTN_EAST,
    BTN_NORTH,
    BTN_SELECT,
    BTN_SOUTH,
    BTN_START,
    BTN_THUMBL,
    BTN_THUMBR,
    BTN_TL,
    BTN_TR,
    BTN_WEST,
    BUS_USB,
    EV_ABS,
    EV_KEY,
    EV_SYN,
    NEUTRAL,
    STICK_MAX,
    SYN_REPORT,
    TRIGGER_MAX,
    VIRTUAL_PAD_NAME,
    VIRTUAL_PAD_PRODUCT,
    VIRTUAL_PAD_VENDOR,
    Event,
    PadState,
    wants_takeover,
)
from pyrofling.seqnum import seq16_delta
from pyrofling.wire import GamepadButton, GamepadState


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


class PadVerdict(enum.Enum):
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

    def offer(self, conn_id: int, msg: GamepadState) -> tuple[PadVerdict, PadUpdate | None]:
        last = self._last_seq.get(conn_id)
        if last is not None and seq16_delta(msg.seq, last) <= 0:
            return self._count(PadVerdict.STALE), None
        self._last_seq[conn_id] = msg.seq
        state = PadState.of(msg)
        took_over = False
        if self.owner is not None and self.owner != conn_id:
            if not wants_takeover(state):
                return self._count(PadVerdict.NOT_OWNER), None
            took_over = True
            self.stats.takeovers += 1
        self.owner = conn_id
        events = pad_events(self.applied, state, self.spec)
        self.applied = state
        self.stats.applied += 1
        self._count(PadVerdict.APPLIED)
        return PadVerdict.APPLIED, PadUpdate(conn_id, msg.seq, state, events, took_over)

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

    def _count(self, verdict: PadVerdict) -> PadVerdict:
        self.stats.verdicts[verdict.value] += 1
        return verdict

    def summary(self) -> dict[str, object]:
        return {
            "states_applied": self.stats.applied,
            "takeovers": self.stats.takeovers,
            "owner": self.owner,
            "verdicts": dict(self.stats.verdicts),
        }
