"""The local gamepad, read through evdev on the viewer's event loop.

:class:`EvdevPadReader` finds the first real gamepad in ``/dev/input`` (never
pyrofling's own virtual pad), reads it on the event loop and keeps looking once a
second while there is none, so a pad can be plugged in or out at any time.  What
its events mean is :mod:`pyrofling.core.input.pad`'s (:class:`~pyrofling.core.input.pad.EvdevMapper`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import glob
import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

from pyrofling.core.input.pad import (
    EV_ABS,
    EV_KEY,
    NEUTRAL,
    AxisInfo,
    EvdevMapper,
    PadCandidate,
    PadState,
    choose_pad,
    face_layout_for,
)

log = logging.getLogger(__name__)


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
