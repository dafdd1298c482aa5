"""The host's virtual keyboard, mouse and pointer (protocol.md §7.11): uinput devices games and the desktop see.

:class:`~pyrofling.core.input.keyboard_mouse.InputRouter` (in the host's sessions)
decides what reaches them and which events each update makes; this module writes
those events.  :class:`UinputInput` makes three python-uinput devices: a keyboard,
a relative mouse (buttons, motion, wheels) and an absolute pointer (where the
viewer's pointer is over the picture while it is not captured) — one device each,
as libinput expects.  Without ``/dev/uinput`` the host warns once and carries on
(:class:`NullInput`); :class:`RecordingInput` keeps every event with its time
for tests and ``bench input``.  :class:`InputOutput` fans each update out to the
devices and to listeners (capture clients: Python games read keys and the mouse
without uinput).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from pyrofling.core.input.keyboard_mouse import ABS_MAX, KEYBOARD_CODES, MOUSE_BUTTONS, InputUpdate
from pyrofling.core.input.pad.state import (
    ABS_X,
    ABS_Y,
    BUS_USB,
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
from pyrofling.server.gamepad import UinputUnavailable

log = logging.getLogger(__name__)

INPUT_KINDS = ("uinput", "portal", "none")
DEVICE_NAMES = {
    "keyboard": "PyroFling virtual keyboard",
    "mouse": "PyroFling virtual mouse",
    "pointer": "PyroFling virtual pointer",
}
#: Same vendor as the virtual pad (a viewer on this machine never reads them back); one product each.
VENDOR = 0x8998
PRODUCTS = {"keyboard": 0xFFE0, "mouse": 0xFFE1, "pointer": 0xFFE2}


class InputDevices(Protocol):
    description: str

    def write(self, device: str, events: Sequence[Event]) -> None: ...

    def close(self) -> None: ...


def _capabilities(device: str) -> list[tuple[int, ...]]:
    if device == "keyboard":
        return [(EV_KEY, code) for code in KEYBOARD_CODES]
    if device == "mouse":
        caps: list[tuple[int, ...]] = [(EV_KEY, code) for code in MOUSE_BUTTONS]
        return caps + [(EV_REL, code) for code in (REL_X, REL_Y, REL_WHEEL, REL_HWHEEL)]
    # An absolute pointer needs a button to count as one (libinput); it never sends it.
    return [(EV_KEY, MOUSE_BUTTONS[0]), (EV_ABS, ABS_X, 0, ABS_MAX, 0, 0), (EV_ABS, ABS_Y, 0, ABS_MAX, 0, 0)]


class UinputInput:
    """Three uinput devices through python-uinput (``/dev/uinput``)."""

    def __init__(self, *, path: str = "/dev/uinput") -> None:
        if not os.path.exists(path):
            raise UinputUnavailable(f"{path} does not exist (load the module: sudo modprobe uinput)")
        if not os.access(path, os.W_OK):
            raise UinputUnavailable(f"{path} is not writable by this user (see the README's udev rule)")
        import uinput  # python-uinput; only hosts that make the devices load it

        self._devices: dict[str, Any] = {}
        try:
            for device, name in DEVICE_NAMES.items():
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                self._devices[device] = uinput.Device(
                    _capabilities(device), name=name, bustype=BUS_USB, vendor=VENDOR, product=PRODUCTS[device], fd=fd
                )
        except OSError as exc:
            self.close()
            raise UinputUnavailable(f"cannot create the virtual keyboard and mouse on {path}: {exc}") from exc
        self.description = "uinput keyboard, mouse and pointer"

    def write(self, device: str, events: Sequence[Event]) -> None:
        dev = self._devices[device]
        for ev_type, code, value in events:
            if ev_type == EV_SYN and code == SYN_REPORT:
                dev.syn()
            else:
                dev.emit((ev_type, code), value, syn=False)

    def close(self) -> None:
        for dev in self._devices.values():
            dev.destroy()
        self._devices.clear()


class NullInput:
    def __init__(self, reason: str) -> None:
        self.description = f"no virtual keyboard or mouse ({reason})"
        self.dropped_events = 0

    def write(self, device: str, events: Sequence[Event]) -> None:
        self.dropped_events += len(events)

    def close(self) -> None:
        pass


class RecordingInput:
    """Keeps every event with its device and the time it was written (``time.monotonic``)."""

    def __init__(self) -> None:
        self.description = "recording keyboard and mouse"
        self.events: list[tuple[float, str, Event]] = []

    def write(self, device: str, events: Sequence[Event]) -> None:
        now = time.monotonic()
        self.events.extend((now, device, e) for e in events)

    def of(self, device: str) -> list[Event]:
        return [e for _, d, e in self.events if d == device and e[0] != EV_SYN]

    def close(self) -> None:
        pass


def open_input_devices(kind: str) -> InputDevices:
    """``uinput`` (falls back to :class:`NullInput` with a warning) or ``none``; ``portal``'s devices come with the
    ``wayland`` source."""
    if kind == "none":
        return NullInput("turned off with --virtual-input none")
    if kind == "portal":  # the desktop portal's keyboard and pointer come with its source (--source wayland)
        raise ValueError("--virtual-input portal goes with --source wayland (the portal of the desktop you share)")
    if kind != "uinput":
        raise ValueError(f"unknown virtual input {kind!r}; choose one of: {', '.join(INPUT_KINDS)}")
    try:
        return UinputInput()
    except UinputUnavailable as exc:
        log.warning("no virtual keyboard or mouse: %s; keys and the mouse from viewers are ignored", exc)
        return NullInput(str(exc))


class InputOutput:
    """Performs the router's updates: each device's report, then the listeners."""

    def __init__(self, devices: InputDevices, *, trace: Path | None = None) -> None:
        self.devices = devices
        self._trace: IO[str] | None = trace.open("w") if trace is not None else None
        self.listeners: list[Callable[[InputUpdate], None]] = []
        self.updates = 0
        self.events_written = 0
        self.write_errors = 0

    def apply(self, update: InputUpdate) -> None:
        written = 0
        for device, events in (("keyboard", update.keyboard), ("mouse", update.mouse), ("pointer", update.pointer)):
            if not events:
                continue
            try:
                self.devices.write(device, events)
            except OSError as exc:
                self.write_errors += 1
                log.debug("virtual %s write failed: %s", device, exc)
            self.events_written += len(events)
            written += len(events)
        self.updates += 1
        if self._trace is not None:  # after the writes: what a bench times (events: 0 for a state that changed nothing)
            record: dict[str, object] = {"t": time.monotonic(), "conn": update.conn_id, "seq": update.seq,
                                         "events": written}  # fmt: skip
            moved = [(code, value) for kind, code, value in update.mouse if kind == EV_REL and code in (REL_X, REL_Y)]
            if moved:  # the relative motion written (REL_X, REL_Y), for benches that total it
                record["rel"] = [sum(v for c, v in moved if c == REL_X), sum(v for c, v in moved if c == REL_Y)]
            self._trace.write(json.dumps(record, separators=(",", ":")) + "\n")
        for listener in self.listeners:
            listener(update)

    def summary(self) -> dict[str, Any]:
        return {
            "devices": self.devices.description,
            "updates": self.updates,
            "events_written": self.events_written,
            "write_errors": self.write_errors,
        }

    def close(self) -> None:
        if self._trace is not None:
            self._trace.close()
            self._trace = None
        self.devices.close()
