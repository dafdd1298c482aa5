"""The gamepad adapters: evdev reading (fake devices on real pipes), uinput writing, the pad output, the link.

This machine has no /dev/input and no /dev/uinput: the tests against the real devices
skip here with the reason, and run where the devices exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import pytest
from support import until

from pyrofling.client.gamepad import EvdevPadReader, GamepadConfig, GamepadLink
from pyrofling.core.input.pad import (
    ABS_X,
    ABS_Y,
    BTN_EAST,
    BTN_SOUTH,
    EV_ABS,
    EV_KEY,
    EV_SYN,
    NEUTRAL,
    SYN_DROPPED,
    SYN_REPORT,
    VIRTUAL_PAD,
    PadSenderConfig,
    PadState,
    PadUpdate,
    choose_pad,
)
from pyrofling.server.gamepad import (
    NullPad,
    PadOutput,
    RecordingPad,
    UinputPad,
    UinputUnavailable,
    open_virtual_pad,
)
from pyrofling.wire import GamepadButton, GamepadState

# -- fake evdev devices ---------------------------------------------------------------------------


class Event(NamedTuple):
    type: int
    code: int
    value: int


class AbsInfo(NamedTuple):
    value: int
    min: int
    max: int
    fuzz: int = 0
    flat: int = 0
    resolution: int = 0


class Info(NamedTuple):
    bustype: int
    vendor: int
    product: int
    version: int = 1


class FakeDevice:
    """Looks like evdev.InputDevice to the reader; its fd is a real pipe the event loop watches."""

    def __init__(self, path: str, *, vendor: int = 0x045E, product: int = 0x028E, pad: bool = True) -> None:
        self.path = path
        self.name = f"fake pad {path}"
        self.info = Info(3, vendor, product)
        self.keys = [BTN_SOUTH, BTN_EAST] if pad else [30, 31]
        self.axes = {ABS_X: AbsInfo(0, -32768, 32767), ABS_Y: AbsInfo(0, -32768, 32767)} if pad else {}
        self.active: set[int] = set()
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        self.fd = self._r
        self.queue: list[Event] = []
        self.unplugged = False
        self.closed = False

    def capabilities(self, absinfo: bool = True) -> dict[int, list[Any]]:
        caps: dict[int, list[Any]] = {EV_KEY: list(self.keys)}
        if self.axes:
            caps[EV_ABS] = list(self.axes.items()) if absinfo else list(self.axes)
        return caps

    def absinfo(self, code: int) -> AbsInfo:
        return self.axes[code]

    def active_keys(self) -> list[int]:
        return sorted(self.active)

    def push(self, *events: tuple[int, int, int]) -> None:
        self.queue += [Event(*e) for e in events]
        os.write(self._w, b"x")

    def unplug(self) -> None:
        self.unplugged = True
        os.write(self._w, b"x")

    def read(self) -> Iterator[Event]:
        with contextlib.suppress(BlockingIOError):
            os.read(self._r, 4096)
        if self.unplugged:
            raise OSError(errno.ENODEV, "No such device")
        if not self.queue:
            raise BlockingIOError
        events, self.queue = self.queue, []
        return iter(events)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self._r)
            os.close(self._w)


class FakeInput:
    """The /dev/input directory: devices come and go."""

    def __init__(self) -> None:
        self.plugged: dict[str, Callable[[], FakeDevice]] = {}
        self.opened: list[FakeDevice] = []

    def list_devices(self) -> list[str]:
        return list(self.plugged)

    def open_device(self, path: str) -> FakeDevice:
        if path not in self.plugged:
            raise OSError(errno.ENOENT, "gone")
        dev = self.plugged[path]()
        self.opened.append(dev)
        return dev


SOUTH = PadState(buttons=GamepadButton.SOUTH)


def test_reader_waits_for_a_pad_reads_it_and_survives_unplugging() -> None:
    fake = FakeInput()
    states: list[PadState] = []

    async def scenario() -> EvdevPadReader:
        reader = EvdevPadReader(
            states.append, scan_interval_s=0.02, list_devices=fake.list_devices, open_device=fake.open_device
        )
        reader.start(asyncio.get_running_loop())
        await asyncio.sleep(0.06)
        assert reader.connects == 0 and states == []
        fake.plugged["/dev/input/event4"] = lambda: FakeDevice("/dev/input/event4")
        await until(lambda: reader.connects == 1)
        assert states == [NEUTRAL]  # connected at rest: the link learns a pad is there
        dev = fake.opened[-1]
        dev.push((EV_KEY, BTN_SOUTH, 1), (EV_ABS, ABS_X, 32767), (EV_SYN, SYN_REPORT, 0))
        await until(lambda: len(states) == 2)
        assert states[-1] == PadState(buttons=GamepadButton.SOUTH, lx=32767)
        dev.push((EV_KEY, BTN_SOUTH, 1), (EV_SYN, SYN_REPORT, 0))  # autorepeat: no change, no callback
        dev.push((EV_ABS, ABS_X, 0), (EV_SYN, SYN_REPORT, 0))
        await until(lambda: len(states) == 3)
        assert states[-1] == SOUTH
        del fake.plugged["/dev/input/event4"]
        dev.unplug()
        await until(lambda: reader.disconnects == 1)
        assert states[-1] == NEUTRAL and dev.closed  # nothing stays held when the pad goes
        fake.plugged["/dev/input/event9"] = lambda: FakeDevice("/dev/input/event9")
        await until(lambda: reader.connects == 2)
        assert "event9" in reader.description
        reader.close()
        return reader

    reader = asyncio.run(scenario())
    assert reader.events_read == 7
    assert all(d.closed for d in fake.opened)


def test_reader_picks_a_real_pad_and_closes_everything_else() -> None:
    fake = FakeInput()
    fake.plugged = {
        "/dev/input/event1": lambda: FakeDevice("/dev/input/event1", vendor=0x8998, product=0xFFEE),  # ours
        "/dev/input/event2": lambda: FakeDevice("/dev/input/event2", pad=False),  # a keyboard
        "/dev/input/event11": lambda: FakeDevice("/dev/input/event11"),
        "/dev/input/event3": lambda: FakeDevice("/dev/input/event3", vendor=0x054C),  # a DualShock
    }

    async def scenario() -> EvdevPadReader:
        reader = EvdevPadReader(lambda s: None, list_devices=fake.list_devices, open_device=fake.open_device)
        reader.start(asyncio.get_running_loop())
        return reader

    reader = asyncio.run(scenario())
    assert "event3" in reader.description
    chosen = [d for d in fake.opened if not d.closed]
    assert [d.path for d in chosen] == ["/dev/input/event3"]
    reader.close()
    assert all(d.closed for d in fake.opened)


def test_reader_rereads_the_pad_after_the_kernel_dropped_events() -> None:
    fake = FakeInput()
    fake.plugged["/dev/input/event0"] = lambda: FakeDevice("/dev/input/event0")
    states: list[PadState] = []

    async def scenario() -> None:
        reader = EvdevPadReader(states.append, list_devices=fake.list_devices, open_device=fake.open_device)
        reader.start(asyncio.get_running_loop())
        dev = fake.opened[0]
        dev.active = {BTN_EAST}
        dev.axes[ABS_Y] = AbsInfo(-32768, -32768, 32767)
        dev.push((EV_SYN, SYN_DROPPED, 0), (EV_KEY, BTN_SOUTH, 1), (EV_SYN, SYN_REPORT, 0))
        await until(lambda: len(states) == 2)
        reader.close()

    asyncio.run(scenario())
    # The event inside the dropped report is ignored; the device's own state is read instead.
    assert states[-1] == PadState(buttons=GamepadButton.EAST, ly=-32767)


def test_a_pad_unplugged_while_being_opened_is_skipped_and_looked_for_again() -> None:
    fake = FakeInput()

    class Vanishing(FakeDevice):
        def absinfo(self, code: int) -> AbsInfo:
            raise OSError(errno.ENODEV, "No such device")

    fake.plugged["/dev/input/event0"] = lambda: Vanishing("/dev/input/event0")

    async def scenario() -> EvdevPadReader:
        reader = EvdevPadReader(lambda s: None, scan_interval_s=0.02, list_devices=fake.list_devices,
                                open_device=fake.open_device)  # fmt: skip
        reader.start(asyncio.get_running_loop())
        assert reader.connects == 0 and fake.opened[0].closed
        fake.plugged["/dev/input/event0"] = lambda: FakeDevice("/dev/input/event0")  # plugged back in
        await until(lambda: reader.connects == 1)
        reader.close()
        return reader

    asyncio.run(scenario())


@pytest.mark.skipif(not os.path.isdir("/dev/input"), reason="no /dev/input on this machine (no input devices)")
def test_reader_lists_real_input_devices_without_error() -> None:
    async def scenario() -> EvdevPadReader:
        reader = EvdevPadReader(lambda s: None)
        reader.start(asyncio.get_running_loop())
        await asyncio.sleep(0.05)
        reader.close()
        return reader

    reader = asyncio.run(scenario())
    # It took the pad that the pure choice picks from the same real devices, or said there is none.
    import evdev

    from pyrofling.client.evdev_pad import _evdev_candidates

    found = _evdev_candidates(reader._readable_input_devices(), evdev.InputDevice)
    chosen = choose_pad(c for c, _ in found)
    for _, dev in found:
        dev.close()
    assert reader.connects == (chosen is not None)
    assert reader.description == (f"{chosen.name} ({chosen.path})" if chosen else "no gamepad")


# -- the uinput pad ---------------------------------------------------------------------------------


def test_uinput_pad_explains_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(UinputUnavailable, match=r"does not exist.*modprobe uinput"):
        UinputPad(path=str(tmp_path / "uinput"))


@pytest.mark.skipif(os.path.exists("/dev/uinput"), reason="this machine has /dev/uinput")
def test_host_without_uinput_gets_a_null_pad_and_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        pad = open_virtual_pad("uinput")
    assert isinstance(pad, NullPad) and "does not exist" in pad.description
    assert "gamepad input from viewers is ignored" in caplog.text
    pad.write([(EV_KEY, BTN_SOUTH, 1), (EV_SYN, SYN_REPORT, 0)])
    assert pad.dropped_events == 2
    with pytest.raises(ValueError, match="choose one of: uinput, none"):
        open_virtual_pad("xinput")
    assert isinstance(open_virtual_pad("none"), NullPad)


class RecordingUinputDevice:
    """Stands in for python-uinput's Device: records what the adapter asks of it."""

    created: ClassVar[list[RecordingUinputDevice]] = []

    def __init__(self, events: list[tuple[int, ...]], **kwargs: Any) -> None:
        self.capabilities = events
        self.kwargs = kwargs
        self.calls: list[tuple[Any, ...]] = []
        RecordingUinputDevice.created.append(self)

    def emit(self, event: tuple[int, int], value: int, syn: bool = True) -> None:
        self.calls.append(("emit", event, value, syn))

    def syn(self) -> None:
        self.calls.append(("syn",))

    def destroy(self) -> None:
        self.calls.append(("destroy",))


def test_uinput_pad_creates_the_reference_device_and_writes_events_then_one_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uinput

    monkeypatch.setattr(uinput, "Device", RecordingUinputDevice)
    node = tmp_path / "uinput"
    node.write_bytes(b"")  # a writable file stands in for the device node
    pad = UinputPad(path=str(node))
    [dev] = RecordingUinputDevice.created[-1:]
    assert dev.kwargs["name"] == "PyroFling virtual gamepad"
    assert (dev.kwargs["bustype"], dev.kwargs["vendor"], dev.kwargs["product"]) == (0x03, 0x8998, 0xFFEE)
    assert [c for c in dev.capabilities if c[0] == EV_KEY] == [(1, code) for _, code in VIRTUAL_PAD.keys]
    assert (3, ABS_X, -32767, 32767, 0, 0) in dev.capabilities and (3, 0x02, 0, 255, 0, 0) in dev.capabilities
    assert (3, 0x10, -1, 1, 0, 0) in dev.capabilities
    pad.write([(EV_KEY, BTN_SOUTH, 1), (EV_ABS, ABS_X, -5), (EV_SYN, SYN_REPORT, 0)])
    assert dev.calls == [("emit", (1, BTN_SOUTH), 1, False), ("emit", (3, ABS_X), -5, False), ("syn",)]
    pad.close()
    assert dev.calls[-1] == ("destroy",)


@pytest.mark.skipif(
    not os.access("/dev/uinput", os.W_OK) or not os.path.isdir("/dev/input"),
    reason="no writable /dev/uinput on this machine (needs the uinput kernel module and access to it)",
)
def test_real_uinput_device_appears_with_the_reference_identity_and_reports_events() -> None:
    import evdev

    pad = UinputPad()
    try:
        time.sleep(0.3)  # udev creates the event node
        devices = [evdev.InputDevice(p) for p in evdev.list_devices(writable=False)]
        [dev] = [d for d in devices if d.name == "PyroFling virtual gamepad"]
        assert (dev.info.vendor, dev.info.product, dev.info.bustype) == (0x8998, 0xFFEE, 0x03)
        pad.write([(EV_KEY, BTN_SOUTH, 1), (EV_ABS, ABS_X, 1234), (EV_SYN, SYN_REPORT, 0)])
        time.sleep(0.05)
        got = [(e.type, e.code, e.value) for e in dev.read()]
        assert got == [(EV_KEY, BTN_SOUTH, 1), (EV_ABS, ABS_X, 1234), (EV_SYN, SYN_REPORT, 0)]
    finally:
        pad.close()


# -- pad output -------------------------------------------------------------------------------------


def test_pad_output_writes_the_pad_the_trace_and_tells_listeners(tmp_path: Path) -> None:
    pad = RecordingPad()
    trace = tmp_path / "trace.jsonl"
    out = PadOutput(pad, trace=trace)
    heard: list[PadUpdate] = []
    out.listeners.append(heard.append)
    events = [(EV_KEY, BTN_SOUTH, 1), (EV_SYN, SYN_REPORT, 0)]
    out.apply(PadUpdate(3, 41, SOUTH, events))
    out.apply(PadUpdate(3, 42, SOUTH, []))  # accepted, nothing changed: no write
    out.close()
    assert [e for _, e in pad.events] == events and pad.reports() == [[(EV_KEY, BTN_SOUTH, 1)]]
    assert [(u.seq, u.state) for u in heard] == [(41, SOUTH), (42, SOUTH)]
    assert out.states_applied == 2 and out.events_written == 2
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [(r["conn"], r["seq"], r["events"]) for r in lines] == [(3, 41, [[1, BTN_SOUTH, 1], [0, 0, 0]]), (3, 42, [])]
    assert pad.closed


def test_a_failing_pad_write_is_counted_not_fatal() -> None:
    class Broken(RecordingPad):
        def write(self, events: Any) -> None:
            raise OSError(errno.ENODEV, "gone")

    out = PadOutput(Broken())
    out.apply(PadUpdate(1, 1, SOUTH, [(EV_KEY, BTN_SOUTH, 1), (EV_SYN, SYN_REPORT, 0)]))
    assert out.write_errors == 1 and out.states_applied == 1


# -- the link on the viewer's loop ------------------------------------------------------------------


class StillReader:
    """A reader with no pad (or, with ``pad=True``, a pad at rest)."""

    def __init__(self, on_change: Callable[[PadState], None], *, pad: bool = False, **_: Any) -> None:
        self.on_change = on_change
        self.state = NEUTRAL
        self.connects = 1 if pad else 0
        self.disconnects = 0
        self.description = "still pad" if pad else "no gamepad"

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        pass

    def close(self) -> None:
        pass


def run_link(link: GamepadLink, body: Callable[[list[bytes]], Any]) -> list[GamepadState]:
    sent: list[bytes] = []

    async def scenario() -> None:
        link.start(asyncio.get_running_loop())
        link.attach(sent.append)
        await body(sent)
        link.close()

    asyncio.run(scenario())
    return [GamepadState.parse(d) for d in sent]


def test_a_client_with_no_input_sends_nothing_until_a_key_is_pressed(tmp_path: Path) -> None:
    log = tmp_path / "sends.jsonl"
    link = GamepadLink(GamepadConfig(send_log=log), reader_factory=StillReader)

    async def body(sent: list[bytes]) -> None:
        await asyncio.sleep(0.05)
        assert sent == [] and not link.active  # a spectator never grabs the pad
        assert link.key("Z", True) and not link.key("V", True)
        await until(lambda: len(sent) >= 1)
        # Held and unchanged, the state still goes out again and again (its cadence is the pure sender's,
        # tested in virtual time).
        await until(lambda: len(sent) >= 5)
        assert all(GamepadState.parse(d).buttons == GamepadButton.SOUTH for d in sent)
        link.key("Z", False)
        await until(lambda: GamepadState.parse(sent[-1]).buttons == 0)

    states = run_link(link, body)
    assert states[0].buttons == GamepadButton.SOUTH and states[-1].buttons == 0
    assert [s.seq for s in states] == list(range(len(states)))
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["seq"] for r in logged] == [s.seq for s in states]
    assert link.summary()["states_sent"] == len(states)


def test_a_connected_pad_sends_even_at_rest() -> None:
    link = GamepadLink(GamepadConfig(), reader_factory=lambda cb, **kw: StillReader(cb, pad=True))

    async def body(sent: list[bytes]) -> None:
        await until(lambda: len(sent) >= 5)

    states = run_link(link, body)
    assert all(PadState.of(s) == NEUTRAL for s in states)


def test_the_sweep_changes_the_state_on_every_send_and_detach_stops_sending() -> None:
    link = GamepadLink(GamepadConfig(source="sweep", sender=PadSenderConfig(interval_s=0.004)))

    async def body(sent: list[bytes]) -> None:
        await until(lambda: len(sent) >= 20)
        link.detach()
        n = len(sent)
        await asyncio.sleep(0.03)
        assert len(sent) == n

    states = run_link(link, body)
    pads = [PadState.of(s) for s in states]
    assert all(a != b for a, b in itertools.pairwise(pads))


def test_window_focus_loss_releases_held_keys() -> None:
    link = GamepadLink(GamepadConfig(source="none"))

    async def body(sent: list[bytes]) -> None:
        link.key("W", True)
        await until(lambda: bool(sent) and GamepadState.parse(sent[-1]).ly == -32767)
        link.release_keys()
        await until(lambda: GamepadState.parse(sent[-1]).ly == 0)

    run_link(link, body)


def test_unknown_gamepad_settings_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="unknown gamepad source 'joystick'"):
        GamepadConfig(source="joystick").check()
    with pytest.raises(ValueError, match="between 1 and 1000 ms"):
        GamepadConfig(sender=PadSenderConfig(interval_s=0.0)).check()
