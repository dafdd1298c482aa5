"""The host's virtual gamepad: the uinput device games see, and what else hears the pad.

:class:`~pyrofling.core.gamepad.GamepadRouter` (in the host's sessions) decides
which states reach the pad and which events they make; this module writes those
events.  :class:`UinputPad` is the real device through python-uinput (needs
``/dev/uinput``); without it the host warns once and carries on streaming with a
:class:`NullPad` (the reference refuses to start).  :class:`RecordingPad` keeps
the exact event sequence with times, for tests and ``bench input``.
:class:`PadOutput` fans each applied state out to the pad, an optional trace file
and listeners (capture clients, so a Python game can read the pad with no uinput).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, Protocol

from pyrofling.core.gamepad import EV_SYN, SYN_REPORT, VIRTUAL_PAD, Event, PadUpdate, VirtualPadSpec

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
    """``uinput`` (falls back to a :class:`NullPad` with a warning) or ``none``.  Pad 1 is the reference's
    device exactly; pads 2.. are named "… 2", "… 3" (players' own pads, protocol.md §7.12)."""
    if kind == "none":
        return NullPad("turned off with --virtual-pad none")
    if kind != "uinput":
        raise ValueError(f"unknown virtual pad {kind!r}; choose one of: {', '.join(PAD_KINDS)}")
    spec = VIRTUAL_PAD if number == 1 else replace(VIRTUAL_PAD, name=f"{VIRTUAL_PAD.name} {number}")
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
