"""The viewer's gamepad: read the local pad (evdev) and the window's keys, send GAMEPAD_STATE.

:class:`EvdevPadReader` finds the first real gamepad in ``/dev/input`` (never
pyrofling's own virtual pad), reads it on the event loop and keeps looking once a
second while there is none, so a pad can be plugged in or out at any time.
:class:`GamepadLink` merges the pad, the window's keyboard pad and (for tests and
benchmarks) a synthetic sweep, and sends the result through
:class:`~pyrofling.core.input.pad.GamepadSender`: every 4 ms like the reference, and
at once when something changes.  The mapping and timing decisions are pure, in
:mod:`pyrofling.core.input.pad`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import glob
import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pyrofling.core.input.pad import (
    EV_ABS,
    EV_KEY,
    NEUTRAL,
    STICK_MAX,
    AxisInfo,
    EvdevMapper,
    GamepadSender,
    KeyboardPad,
    PadCandidate,
    PadSenderConfig,
    PadState,
    choose_pad,
    face_layout_for,
    merge,
)
from pyrofling.timers import DeadlineTimer

log = logging.getLogger(__name__)

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


def _evdev_candidates(paths: Iterable[str], open_device: Callable[[str], Any]) -> list[tuple[PadCandidate, Any]]:
    out = []
    for path in paths:
        try:
            dev = open_device(path)
        except OSError as exc:
            log.debug("cannot open %s: %s", path, exc)
            continue
        caps = dev.capabilities(absinfo=False)
        out.append(
            (
                PadCandidate(
                    path=path,
                    name=dev.name,
                    vendor=dev.info.vendor,
                    product=dev.info.product,
                    keys=frozenset(caps.get(EV_KEY, ())),
                    axes=frozenset(caps.get(EV_ABS, ())),
                ),
                dev,
            )
        )
    return out


class EvdevPadReader:
    """The first real pad, read on the event loop; hot-plug aware.  ``on_change(state)`` on every change.

    ``list_devices`` and ``open_device`` default to python-evdev's; tests pass fakes (this machine
    has no ``/dev/input``).
    """

    def __init__(
        self,
        on_change: Callable[[PadState], None],
        *,
        scan_interval_s: float = 1.0,
        list_devices: Callable[[], list[str]] | None = None,
        open_device: Callable[[str], Any] | None = None,
    ) -> None:
        self.on_change = on_change
        self.scan_interval_s = scan_interval_s
        if open_device is None:
            import evdev

            open_device = evdev.InputDevice
        self._list_devices = list_devices or self._readable_input_devices
        self._open_device = open_device
        self._said_unreadable = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._device: Any = None
        self._effect_id: int | None = None  # the rumble effect uploaded to this pad
        self._mapper: EvdevMapper | None = None
        self._scan_handle: asyncio.TimerHandle | None = None
        self._said_none = False
        self.state = NEUTRAL
        self.description = "no gamepad"
        self.connects = 0
        self.disconnects = 0
        self.events_read = 0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._scan()

    def close(self) -> None:
        if self._scan_handle is not None:
            self._scan_handle.cancel()
            self._scan_handle = None
        self._release()

    def _scan(self) -> None:
        self._scan_handle = None
        try:
            paths = self._list_devices()
        except OSError as exc:
            paths = []
            log.debug("cannot list input devices: %s", exc)
        found = _evdev_candidates(paths, self._open_device)
        chosen = choose_pad(c for c, _ in found)
        for cand, dev in found:
            if chosen is None or cand.path != chosen.path:
                dev.close()
        if chosen is None:
            if not self._said_none:
                self._said_none = True
                log.info("no gamepad found yet; plug one in at any time")
            self._schedule_scan()
            return
        device = next(dev for cand, dev in found if cand.path == chosen.path)
        self._take(chosen, device)

    def _readable_input_devices(self) -> list[str]:
        paths = sorted(glob.glob("/dev/input/event*"))
        readable = [p for p in paths if os.access(p, os.R_OK)]
        if paths and not readable and not self._said_unreadable:
            self._said_unreadable = True
            log.warning("this user cannot read /dev/input (add it to the 'input' group to use a gamepad)")
        return readable

    def _schedule_scan(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._scan_handle = self._loop.call_later(self.scan_interval_s, self._scan)

    def _take(self, cand: PadCandidate, device: Any) -> None:
        assert self._loop is not None
        try:
            abs_caps = device.capabilities(absinfo=True).get(EV_ABS, [])
            axes = {code: AxisInfo(info.min, info.max, info.flat) for code, info in abs_caps}
            self._device = device
            self._mapper = EvdevMapper(axes, face_layout_for(cand.vendor))
            self._resync()
        except OSError as exc:  # unplugged between the scan and now
            log.debug("cannot read %s: %s", cand.path, exc)
            self._release()
            self._schedule_scan()
            return
        self.connects += 1
        self._said_none = False
        self.description = f"{cand.name} ({cand.path})"
        log.info("gamepad: %s, %s face-button layout", self.description, self._mapper.layout.value)
        self._loop.add_reader(device.fd, self._readable)
        self.on_change(self.state)  # even at rest: a pad is there, so this client starts sending

    def rumble(self, strong: int, weak: int, duration_ms: int) -> bool:
        """Play (or stop, duration 0) the pad's motors with evdev force feedback; False: no pad, or one that
        cannot rumble.  One effect is uploaded and then updated in place."""
        dev = self._device
        if dev is None:
            return False
        from evdev import ecodes, ff  # the reader made the device with evdev: it is there

        try:
            if ecodes.FF_RUMBLE not in dev.capabilities().get(ecodes.EV_FF, []):
                return False
            if duration_ms == 0:
                if self._effect_id is not None:
                    dev.write(ecodes.EV_FF, self._effect_id, 0)
                return True
            length = 0 if duration_ms >= 0xFFFF else duration_ms  # 0: until stopped, as Linux says
            effect = ff.Effect(
                ecodes.FF_RUMBLE,
                -1 if self._effect_id is None else self._effect_id,
                0,
                ff.Trigger(0, 0),
                ff.Replay(length, 0),
                ff.EffectType(ff_rumble_effect=ff.Rumble(strong_magnitude=strong, weak_magnitude=weak)),
            )
            self._effect_id = dev.upload_effect(effect)
            dev.write(ecodes.EV_FF, self._effect_id, 1)
            return True
        except OSError as exc:  # a pad that refuses effects, or one opened read-only
            log.debug("rumble on %s failed: %s", self.description, exc)
            return False

    def _resync(self) -> None:
        """Read the whole pad (at start and after the kernel dropped events)."""
        assert self._mapper is not None
        dev = self._device
        abs_values = {code: dev.absinfo(code).value for code in self._mapper.axes}
        self._emit(self._mapper.resync(dev.active_keys(), abs_values))

    def _readable(self) -> None:
        mapper = self._mapper
        if mapper is None:
            return
        try:
            for event in self._device.read():
                self.events_read += 1
                state = mapper.feed(event.type, event.code, event.value)
                if state is not None:
                    self._emit(state)
                elif mapper.needs_resync:  # the kernel dropped events: read the whole pad again
                    self._resync()
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno not in (errno.ENODEV, errno.EIO, errno.EBADF):
                log.warning("reading the gamepad failed: %s", exc)
            log.info("gamepad %s went away; looking for another", self.description)
            self.disconnects += 1
            self._release()
            self._emit(NEUTRAL)
            self._schedule_scan()

    def _emit(self, state: PadState) -> None:
        if state != self.state:
            self.state = state
            self.on_change(state)

    def _release(self) -> None:
        dev, self._device, self._mapper = self._device, None, None
        self._effect_id = None
        self.description = "no gamepad"
        if dev is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(Exception):
                self._loop.remove_reader(dev.fd)
        with contextlib.suppress(OSError):
            dev.close()


# --------------------------------------------------------------------------------------------
# Synthetic pad
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
