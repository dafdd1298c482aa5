"""The viewer's gamepad: read the local pad (evdev) and the window's keys, send GAMEPAD_STATE.

:class:`~pyrofling.client.evdev_pad.EvdevPadReader` reads the local pad.
:class:`GamepadLink` merges the pad, the window's keyboard pad and (for tests and
benchmarks) a synthetic sweep, and sends the result through
:class:`~pyrofling.core.input.pad.GamepadSender`: every 4 ms like the reference, and
at once when something changes.  The mapping and timing decisions are pure, in
:mod:`pyrofling.core.input.pad`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pyrofling.client.evdev_pad import EvdevPadReader
from pyrofling.core.input.pad import (
    NEUTRAL,
    STICK_MAX,
    GamepadSender,
    KeyboardPad,
    PadSenderConfig,
    PadState,
    merge,
)
from pyrofling.timers import DeadlineTimer

log = logging.getLogger(__name__)

__all__ = ["GAMEPAD_SOURCES", "EvdevPadReader", "GamepadConfig", "GamepadLink", "SweepPad"]

GAMEPAD_SOURCES = ("evdev", "sweep", "none")


@dataclass(frozen=True, slots=True)
class GamepadConfig:
    """What the viewer (or ``pyrofling gamepad``) sends as its pad."""

    #: evdev: the first physical pad; sweep: a synthetic pad whose left stick never stops moving
    #: (every state differs, for tests and ``bench input``); none: only the window's keyboard.
    source: str = "evdev"
    sender: PadSenderConfig = field(default_factory=PadSenderConfig)
    #: Write each sent state's sequence number and send time as JSON lines (for ``bench input``).
    send_log: Path | None = None
    #: Write each RUMBLE from the host with the time it reached the pad, as JSON lines (benches).
    rumble_log: Path | None = None
    #: Seconds between looks for a pad while there is none.
    scan_interval_s: float = 1.0

    def check(self) -> None:
        if self.source not in GAMEPAD_SOURCES:
            raise ValueError(f"unknown gamepad source {self.source!r}; choose one of: {', '.join(GAMEPAD_SOURCES)}")
        if not 0.001 <= self.sender.interval_s <= 1.0:
            raise ValueError("the gamepad send interval must be between 1 and 1000 ms")


# --------------------------------------------------------------------------------------------
# evdev
# --------------------------------------------------------------------------------------------


class SweepPad:
    """A pad whose left stick sweeps continuously (one cycle a second), so every poll is a new state."""

    def __init__(self, period_s: float = 1.0) -> None:
        self.period_s = period_s

    def state_at(self, now: float) -> PadState:
        phase = (now / self.period_s) % 1.0
        lx = int(STICK_MAX * math.sin(2 * math.pi * phase))
        ly = int(STICK_MAX * math.cos(2 * math.pi * phase))
        return PadState(lx=lx, ly=ly)


# --------------------------------------------------------------------------------------------
# Sending
# --------------------------------------------------------------------------------------------


class GamepadLink:
    """The pad, the keyboard and the sender on the viewer's event loop.

    :meth:`start` once with the loop; :meth:`attach` with a send function when a session starts
    streaming, :meth:`detach` when it ends.  :meth:`key` may be called from any thread (the window's).

    Nothing is sent until there is input: a pad connected or a mapped key pressed.  The reference
    sends an all-zero state from a viewer with no pad, so a spectator who joins first owns the
    virtual pad and the player has to take it over; here a spectator never takes it.
    """

    def __init__(self, config: GamepadConfig, *, reader_factory: Callable[..., Any] | None = None) -> None:
        config.check()
        self.config = config
        self.sender = GamepadSender(config.sender)
        self.keyboard = KeyboardPad()
        self.keyboard_state = NEUTRAL
        self.sweep = SweepPad() if config.source == "sweep" else None
        self._reader_factory = reader_factory or EvdevPadReader
        self.reader: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._send: Callable[[bytes], None] | None = None
        self._timer = DeadlineTimer(self._poll)
        self._log: IO[str] | None = None
        self._keyboard_used = False
        self.sends_dropped = 0
        #: RUMBLE messages from the host, and how many a real pad played.
        self.rumbles = 0
        self.rumbles_played = 0
        self._rumble_log: IO[str] | None = None
        if config.source == "evdev":
            # Made (evdev imported) now, started with the loop: the import must not delay the first picture.
            try:
                self.reader = self._reader_factory(self._changed, scan_interval_s=config.scan_interval_s)
            except ImportError as exc:  # evdev is a dependency, but a broken install should not stop viewing
                log.warning("cannot read gamepads (%s); the window's keys still work", exc)

    @property
    def pad_state(self) -> PadState:
        return self.reader.state if self.reader is not None else NEUTRAL

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start looking for a pad (the viewer does once a host streams: before, nobody could use it)."""
        self._loop = loop
        if self.config.send_log is not None:
            self._log = self.config.send_log.open("w")
        if self.config.rumble_log is not None:
            self._rumble_log = self.config.rumble_log.open("w")
        if self.reader is not None:
            self.reader.start(loop)

    def close(self) -> None:
        self.detach()
        if self.reader is not None:
            self.reader.close()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._rumble_log is not None:
            self._rumble_log.close()
            self._rumble_log = None

    def attach(self, send: Callable[[bytes], None]) -> None:
        self._send = send
        self._poll()

    def detach(self) -> None:
        self._send = None
        self._timer.cancel()

    def rumble(self, strong: int, weak: int, duration_ms: int, seq: int) -> None:
        """The host says the player's pad should rumble (on the loop): the real pad plays it, if it can."""
        played = (
            self.reader is not None and hasattr(self.reader, "rumble") and self.reader.rumble(strong, weak, duration_ms)
        )
        self.rumbles += 1
        self.rumbles_played += bool(played)
        if self._rumble_log is not None:
            record = {"seq": seq, "t": time.monotonic(), "strong": strong, "played": bool(played)}
            self._rumble_log.write(json.dumps(record) + "\n")

    def key(self, name: str, down: bool) -> bool:
        """A key in the window (any thread); True when it belongs to the keyboard pad."""
        if not self.keyboard.handles(name):
            return False
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._key_on_loop, name, down)
        return True

    def release_keys(self) -> None:
        """The window lost focus (any thread)."""
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._key_on_loop, None, False)

    def _key_on_loop(self, name: str | None, down: bool) -> None:
        state: PadState | None
        if name is None:
            state = self.keyboard.release_all()
        else:
            state = self.keyboard.press(name) if down else self.keyboard.release(name)
        if state is not None and state != self.keyboard_state:
            self._keyboard_used = True
            self.keyboard_state = state
            self._changed(state)

    def current(self, now: float) -> PadState:
        state = merge(self.pad_state, self.keyboard_state)
        if self.sweep is not None:
            state = merge(state, self.sweep.state_at(now))
        return state

    @property
    def active(self) -> bool:
        """Has this client any input to send (a pad now or before, keys used, the sweep)?"""
        pad_seen = self.reader is not None and self.reader.connects > 0
        return pad_seen or self._keyboard_used or self.sweep is not None

    def _changed(self, _state: PadState) -> None:
        if self._send is not None:
            self._poll()

    def _poll(self) -> None:
        if self._send is None or self._loop is None or not self.active:
            return
        now = time.monotonic()
        out = self.sender.poll(self.current(now), now)
        if out is not None:
            seq, data = out
            try:
                self._send(data)
            except OSError:
                self.sends_dropped += 1
            if self._log is not None:
                self._log.write(json.dumps({"seq": seq, "t": now}) + "\n")
        self._timer.arm(self.sender.next_timer())

    def summary(self) -> dict[str, Any]:
        reader = self.reader
        return {
            "source": self.config.source,
            "pad": reader.description if reader is not None else None,
            "pad_connects": reader.connects if reader is not None else 0,
            "pad_disconnects": reader.disconnects if reader is not None else 0,
            "states_sent": self.sender.stats.sent,
            "sent_on_change": self.sender.stats.sent_on_change,
            "send_errors": self.sends_dropped,
            "rumbles": self.rumbles,
            "rumbles_played": self.rumbles_played,
        }
