"""The host's virtual gamepad: the uinput device games see, and what else hears the pad.

:class:`~pyrofling.core.input.pad.GamepadRouter` (in the host's sessions) decides
which states reach the pad and which events they make; this module writes those
events.  :class:`UinputPad` is the real device through python-uinput (needs
``/dev/uinput``); without it the host warns once and carries on streaming with a
:class:`NullPad` (the reference refuses to start).  :class:`RecordingPad` keeps
the exact event sequence with times, for tests and ``bench input``.
:class:`PadOutput` fans each applied state out to the pad, an optional trace file
and listeners (capture clients, so a Python game can read the pad with no uinput).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, Protocol

from pyrofling.core.input.pad import EV_SYN, SYN_REPORT, VIRTUAL_PAD, Event, PadUpdate, VirtualPadSpec
from pyrofling.core.input.pad.rumble import RumbleCommand, RumbleEffects

log = logging.getLogger(__name__)

PAD_KINDS = ("uinput", "none")


class VirtualPad(Protocol):
    """Where accepted gamepad events go."""

    description: str

    def write(self, events: Sequence[Event]) -> None: ...

    def close(self) -> None: ...


class UinputUnavailable(RuntimeError):
    """``/dev/uinput`` is missing or not writable."""


class UinputPad:
    """The reference's virtual pad through python-uinput (``/dev/uinput``)."""

    def __init__(self, spec: VirtualPadSpec = VIRTUAL_PAD, *, path: str = "/dev/uinput") -> None:
        if not os.path.exists(path):
            raise UinputUnavailable(f"{path} does not exist (load the module: sudo modprobe uinput)")
        if not os.access(path, os.W_OK):
            raise UinputUnavailable(
                f"{path} is not writable by this user (add a udev rule giving your user or the 'input' group access)"
            )
        import uinput  # python-uinput; imported here so hosts without a pad never load it

        capabilities: list[tuple[int, ...]] = [(1, code) for _, code in spec.keys]
        capabilities += [(3, code, lo, hi, 0, 0) for _, code, lo, hi in spec.axes]
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise UinputUnavailable(f"cannot open {path}: {exc.strerror}") from exc
        try:
            self._device = uinput.Device(
                capabilities, name=spec.name, bustype=spec.bustype, vendor=spec.vendor, product=spec.product, fd=fd
            )
        except OSError as exc:
            os.close(fd)
            raise UinputUnavailable(f"cannot create the virtual pad on {path}: {exc}") from exc
        self.description = f"uinput device '{spec.name}' ({spec.vendor:04x}:{spec.product:04x})"

    def write(self, events: Sequence[Event]) -> None:
        for ev_type, code, value in events:
            if ev_type == EV_SYN and code == SYN_REPORT:
                self._device.syn()
            else:
                self._device.emit((ev_type, code), value, syn=False)

    def close(self) -> None:
        self._device.destroy()


class EvdevFfPad:
    """The virtual pad through python-evdev's UInput, which (unlike python-uinput) takes force feedback: games
    upload, play and erase rumble effects on it, and :meth:`start_rumble` hands each change to the host as a
    :class:`~pyrofling.core.input.pad.rumble.RumbleCommand` for the pad's player (protocol.md §7.13).  Same name,
    ids, codes and ranges as :class:`UinputPad`."""

    def __init__(self, spec: VirtualPadSpec = VIRTUAL_PAD, *, make_uinput: Callable[..., Any] | None = None) -> None:
        from evdev import AbsInfo, UInput, ecodes

        events: dict[int, Any] = {
            ecodes.EV_KEY: [code for _, code in spec.keys],
            ecodes.EV_ABS: [(code, AbsInfo(0, lo, hi, 0, 0, 0)) for _, code, lo, hi in spec.axes],
            ecodes.EV_FF: [ecodes.FF_RUMBLE, ecodes.FF_GAIN],
        }
        try:
            self._ui = (make_uinput or UInput)(
                events, name=spec.name, vendor=spec.vendor, product=spec.product, bustype=spec.bustype, max_effects=16
            )
        except OSError as exc:
            raise UinputUnavailable(f"cannot create the virtual pad: {exc}") from exc
        self.description = f"uinput device '{spec.name}' ({spec.vendor:04x}:{spec.product:04x}), rumble"
        self.effects = RumbleEffects()
        self._on_rumble: Callable[[RumbleCommand], None] | None = None
        self._loop: Any = None

    def write(self, events: Sequence[Event]) -> None:
        for ev_type, code, value in events:
            if ev_type == EV_SYN and code == SYN_REPORT:
                self._ui.syn()
            else:
                self._ui.write(ev_type, code, value)

    def start_rumble(self, loop: Any, on_rumble: Callable[[RumbleCommand], None]) -> None:
        """Read what games ask of the pad's motors on ``loop``."""
        self._loop, self._on_rumble = loop, on_rumble
        loop.add_reader(self._ui.fileno(), self.readable)

    def readable(self) -> None:
        """Force-feedback traffic from games: uploads and erases answered at once, plays and gain followed."""
        from evdev import ecodes

        try:
            events = list(self._ui.read())
        except BlockingIOError:
            return
        except OSError as exc:
            log.debug("virtual pad read failed: %s", exc)
            return
        for event in events:
            command: RumbleCommand | None = None
            if event.type == ecodes.EV_UINPUT and event.code == ecodes.UI_FF_UPLOAD:
                upload = self._ui.begin_upload(event.value)
                e = upload.effect
                rumble = e.u.ff_rumble_effect
                ok = self.effects.upload(
                    e.id, e.type, rumble.strong_magnitude, rumble.weak_magnitude, e.ff_replay.length
                )
                upload.retval = 0 if ok else -errno.EINVAL
                self._ui.end_upload(upload)
            elif event.type == ecodes.EV_UINPUT and event.code == ecodes.UI_FF_ERASE:
                erase = self._ui.begin_erase(event.value)
                command = self.effects.erase(erase.effect_id)
                erase.retval = 0
                self._ui.end_erase(erase)
            elif event.type == ecodes.EV_FF and event.code == ecodes.FF_GAIN:
                self.effects.set_gain(event.value)
            elif event.type == ecodes.EV_FF:
                command = self.effects.play(event.code, event.value)
            if command is not None and self._on_rumble is not None:
                self._on_rumble(command)

    def close(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._ui.fileno())
        self._ui.close()


class NullPad:
    """No virtual pad on this machine: events are counted and dropped."""

    def __init__(self, reason: str) -> None:
        self.description = f"no virtual pad ({reason})"
        self.dropped_events = 0

    def write(self, events: Sequence[Event]) -> None:
        self.dropped_events += len(events)

    def close(self) -> None:
        pass


class RecordingPad:
    """Keeps every event with the time it was written (``time.monotonic``), for tests and benches."""

    def __init__(self) -> None:
        self.description = "recording pad"
        self.events: list[tuple[float, Event]] = []
        self.closed = False

    def write(self, events: Sequence[Event]) -> None:
        now = time.monotonic()
        self.events.extend((now, e) for e in events)

    def reports(self) -> list[list[Event]]:
        """The events grouped by SYN_REPORT, as a reader of the device sees them."""
        out: list[list[Event]] = []
        current: list[Event] = []
        for _, e in self.events:
            if e[0] == EV_SYN and e[1] == SYN_REPORT:
                out.append(current)
                current = []
            else:
                current.append(e)
        return out

    def close(self) -> None:
        self.closed = True


def open_virtual_pad(kind: str, *, number: int = 1) -> VirtualPad:
    """``uinput`` (falls back to a :class:`NullPad` with a warning) or ``none``.  Pad 1 has the reference's
    identity (name, ids, codes, ranges), with force feedback when evdev can make it; pads 2.. are named "… 2",
    "… 3" (players' own pads, protocol.md §7.12)."""
    if kind == "none":
        return NullPad("turned off with --virtual-pad none")
    if kind != "uinput":
        raise ValueError(f"unknown virtual pad {kind!r}; choose one of: {', '.join(PAD_KINDS)}")
    spec = VIRTUAL_PAD if number == 1 else replace(VIRTUAL_PAD, name=f"{VIRTUAL_PAD.name} {number}")
    if os.access("/dev/uinput", os.W_OK):
        try:
            return EvdevFfPad(spec)  # with rumble
        except (UinputUnavailable, ImportError) as exc:
            log.warning("virtual pad without rumble: %s", exc)
    try:
        return UinputPad(spec)
    except UinputUnavailable as exc:
        log.warning("no virtual gamepad: %s; streaming goes on, gamepad input from viewers is ignored", exc)
        return NullPad(str(exc))


class PadOutput:
    """Performs the router's updates: writes the pad, the trace, and tells the listeners."""

    def __init__(self, pad: VirtualPad, *, trace: Path | None = None) -> None:
        self.pad = pad
        self.listeners: list[Callable[[PadUpdate], None]] = []
        self.states_applied = 0
        self.events_written = 0
        self.write_errors = 0
        self._trace: IO[str] | None = trace.open("w") if trace is not None else None

    def apply(self, update: PadUpdate) -> None:
        if update.events:
            try:
                self.pad.write(update.events)
            except OSError as exc:
                self.write_errors += 1
                log.debug("virtual pad write failed: %s", exc)
            self.events_written += len(update.events)
        self.states_applied += 1
        if self._trace is not None:
            record: dict[str, Any] = {"t": time.monotonic(), "conn": update.conn_id, "seq": update.seq}
            record["events"] = update.events
            self._trace.write(json.dumps(record, separators=(",", ":")) + "\n")
        for listener in self.listeners:
            listener(update)

    def summary(self) -> dict[str, Any]:
        return {"pad": self.pad.description, "events_written": self.events_written, "write_errors": self.write_errors}

    def close(self) -> None:
        if self._trace is not None:
            self._trace.close()
            self._trace = None
        self.pad.close()
