"""The pure gamepad core: evdev mapping, pad choice, keyboard pad, sender, virtual-pad events, ownership."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyrofling.core.input.pad import (
    ABS_BRAKE,
    ABS_GAS,
    ABS_HAT0X,
    ABS_HAT0Y,
    ABS_RX,
    ABS_RY,
    ABS_RZ,
    ABS_X,
    ABS_Y,
    ABS_Z,
    BTN_DPAD_DOWN,
    BTN_DPAD_LEFT,
    BTN_DPAD_RIGHT,
    BTN_DPAD_UP,
    BTN_EAST,
    BTN_MODE,
    BTN_NORTH,
    BTN_SELECT,
    BTN_SOUTH,
    BTN_START,
    BTN_THUMBL,
    BTN_THUMBR,
    BTN_TL,
    BTN_TL2,
    BTN_TR,
    BTN_TR2,
    BTN_WEST,
    EV_ABS,
    EV_KEY,
    EV_SYN,
    NEUTRAL,
    SYN_DROPPED,
    SYN_REPORT,
    VIRTUAL_PAD,
    AxisInfo,
    EvdevMapper,
    FaceLayout,
    GamepadRouter,
    GamepadSender,
    KeyboardPad,
    PadCandidate,
    PadSenderConfig,
    PadState,
    PadVerdict,
    choose_pad,
    face_layout_for,
    hat_value,
    merge,
    pad_events,
    stick_value,
    trigger_value,
)
from pyrofling.wire import GamepadButton, GamepadState

XPAD_STICK = AxisInfo(-32768, 32767, 128)
DS4_STICK = AxisInfo(0, 255)
TRIGGER_1023 = AxisInfo(0, 1023)
SYN = (EV_SYN, SYN_REPORT, 0)

# -- axis scaling ---------------------------------------------------------------------------------


def test_sticks_scale_like_the_reference_int16_of_32767_x() -> None:
    assert stick_value(-32768, XPAD_STICK) == -32767
    assert stick_value(32767, XPAD_STICK) == 32767
    assert stick_value(0, XPAD_STICK) == 0
    assert stick_value(0, DS4_STICK) == -32767 and stick_value(255, DS4_STICK) == 32767
    # Quarter deflection on a 0..255 pad: x = 2·191/255 − 1 = 0.498 → int(32767·0.498), truncated toward zero.
    assert stick_value(191, DS4_STICK) == int(32767 * (2 * 191 / 255 - 1))
    assert stick_value(64, DS4_STICK) == int(32767 * (2 * 64 / 255 - 1))  # negative: truncates toward zero too


def test_the_dead_zone_reported_by_the_device_reads_as_centre() -> None:
    assert stick_value(127, XPAD_STICK) == 0 and stick_value(-100, XPAD_STICK) == 0
    assert stick_value(300, XPAD_STICK) > 0


def test_out_of_range_and_degenerate_axes_are_clamped_not_wrapped() -> None:
    assert stick_value(400, DS4_STICK) == 32767 and stick_value(-5, DS4_STICK) == -32767
    assert trigger_value(2000, TRIGGER_1023) == 255 and trigger_value(-1, TRIGGER_1023) == 0
    assert stick_value(5, AxisInfo(3, 3)) == 0 and trigger_value(5, AxisInfo(3, 3)) == 0


def test_triggers_scale_to_uint8_of_255_x() -> None:
    assert trigger_value(0, TRIGGER_1023) == 0
    assert trigger_value(1023, TRIGGER_1023) == 255
    assert trigger_value(512, TRIGGER_1023) == int(255 * 512 / 1023)


def test_hat_is_the_sign() -> None:
    assert [hat_value(v) for v in (-7, -1, 0, 1, 9)] == [-1, -1, 0, 1, 1]


# -- evdev mapping --------------------------------------------------------------------------------


def xpad_mapper(layout: FaceLayout = FaceLayout.XPAD) -> EvdevMapper:
    axes = {c: XPAD_STICK for c in (ABS_X, ABS_Y, ABS_RX, ABS_RY)}
    axes |= {ABS_Z: AxisInfo(0, 255), ABS_RZ: AxisInfo(0, 255), ABS_HAT0X: AxisInfo(-1, 1), ABS_HAT0Y: AxisInfo(-1, 1)}
    return EvdevMapper(axes, layout)


def press(m: EvdevMapper, code: int, down: bool = True) -> PadState | None:
    m.feed(EV_KEY, code, int(down))
    return m.feed(*SYN)


XPAD_BUTTONS = {
    BTN_SOUTH: GamepadButton.SOUTH,
    BTN_EAST: GamepadButton.EAST,
    BTN_NORTH: GamepadButton.WEST,  # 0x133 is BTN_X: the left button on xpad pads
    BTN_WEST: GamepadButton.NORTH,  # 0x134 is BTN_Y: the top one
    BTN_TL: GamepadButton.TL,
    BTN_TR: GamepadButton.TR,
    BTN_THUMBL: GamepadButton.THUMB_L,
    BTN_THUMBR: GamepadButton.THUMB_R,
    BTN_START: GamepadButton.START,
    BTN_SELECT: GamepadButton.SELECT,
    BTN_MODE: GamepadButton.MODE,
}


@pytest.mark.parametrize(("code", "bit"), XPAD_BUTTONS.items())
def test_each_xpad_button_sets_its_bit_alone_and_clears_it(code: int, bit: GamepadButton) -> None:
    m = xpad_mapper()
    state = press(m, code)
    assert state is not None and state.buttons == bit
    assert press(m, code, down=False) == NEUTRAL


def test_positional_drivers_report_north_and_west_by_position() -> None:
    m = xpad_mapper(FaceLayout.POSITIONAL)
    assert press(m, BTN_NORTH) == PadState(buttons=GamepadButton.NORTH)
    assert press(m, BTN_NORTH, False) == NEUTRAL
    assert press(m, BTN_WEST) == PadState(buttons=GamepadButton.WEST)
    assert face_layout_for(0x054C) is FaceLayout.POSITIONAL and face_layout_for(0x057E) is FaceLayout.POSITIONAL
    assert face_layout_for(0x045E) is FaceLayout.XPAD  # Microsoft


def test_reading_our_own_virtual_pad_back_gives_the_same_bits() -> None:
    """The virtual pad writes West as 0x133 and North as 0x134; an xpad-layout reader maps them back."""
    m = xpad_mapper()
    for bit, code in VIRTUAL_PAD.keys:
        assert press(m, code) == PadState(buttons=bit)
        press(m, code, down=False)


def test_axes_map_to_their_fields_only_at_syn_report() -> None:
    m = xpad_mapper()
    for code, raw in ((ABS_X, 32767), (ABS_Y, -32768), (ABS_RX, -32768), (ABS_RY, 32767), (ABS_Z, 255), (ABS_RZ, 0)):
        assert m.feed(EV_ABS, code, raw) is None
    m.feed(EV_ABS, ABS_HAT0X, -1)
    m.feed(EV_ABS, ABS_HAT0Y, 1)
    assert m.feed(*SYN) == PadState(lx=32767, ly=-32767, rx=-32767, ry=32767, lz=255, rz=0, hat_x=-1, hat_y=1)


def test_brake_and_gas_axes_are_triggers_too() -> None:
    m = EvdevMapper({ABS_BRAKE: AxisInfo(0, 1023), ABS_GAS: AxisInfo(0, 1023)})
    m.feed(EV_ABS, ABS_BRAKE, 1023)
    m.feed(EV_ABS, ABS_GAS, 0)
    assert m.feed(*SYN) == PadState(lz=255, rz=0)


def test_axes_the_device_did_not_describe_are_ignored() -> None:
    m = EvdevMapper({})
    m.feed(EV_ABS, ABS_X, 30000)
    assert m.feed(*SYN) == NEUTRAL


@pytest.mark.parametrize(
    ("codes", "hat"),
    [
        ((BTN_DPAD_UP,), (0, -1)),
        ((BTN_DPAD_DOWN,), (0, 1)),
        ((BTN_DPAD_LEFT,), (-1, 0)),
        ((BTN_DPAD_RIGHT,), (1, 0)),
        ((BTN_DPAD_UP, BTN_DPAD_RIGHT), (1, -1)),
        ((BTN_DPAD_UP, BTN_DPAD_DOWN), (0, 0)),  # a worn pad reporting both: cancel out
    ],
)
def test_dpad_buttons_become_the_hat(codes: tuple[int, ...], hat: tuple[int, int]) -> None:
    m = xpad_mapper()
    for code in codes:
        m.feed(EV_KEY, code, 1)
    state = m.feed(*SYN)
    assert state is not None and (state.hat_x, state.hat_y) == hat
    for code in codes:
        m.feed(EV_KEY, code, 0)
    assert m.feed(*SYN) == NEUTRAL


def test_digital_triggers_read_as_fully_pressed() -> None:
    m = xpad_mapper()
    m.feed(EV_KEY, BTN_TL2, 1)
    assert m.feed(*SYN) == PadState(lz=255)
    m.feed(EV_KEY, BTN_TR2, 1)
    m.feed(EV_KEY, BTN_TL2, 0)
    assert m.feed(*SYN) == PadState(rz=255)


def test_after_syn_dropped_events_are_ignored_until_report_then_resync_asked() -> None:
    m = xpad_mapper()
    press(m, BTN_SOUTH)
    m.feed(EV_SYN, SYN_DROPPED, 0)
    m.feed(EV_KEY, BTN_EAST, 1)  # unreliable: part of the broken report
    assert m.feed(*SYN) is None and m.needs_resync and m.drops == 1
    state = m.resync(keys=[BTN_EAST, 0x1FF], abs_values={ABS_X: 32767, ABS_HAT0Y: -1})
    assert state == PadState(buttons=GamepadButton.EAST, lx=32767, hat_y=-1)
    assert not m.needs_resync
    assert press(m, BTN_EAST, False) == PadState(lx=32767, hat_y=-1)


def test_repeat_events_keep_a_button_held() -> None:
    m = xpad_mapper()
    press(m, BTN_SOUTH)
    m.feed(EV_KEY, BTN_SOUTH, 2)  # autorepeat
    assert m.feed(*SYN) == PadState(buttons=GamepadButton.SOUTH)


# -- choosing a pad -------------------------------------------------------------------------------

PAD_KEYS = frozenset({BTN_SOUTH, BTN_EAST, BTN_START})
PAD_AXES = frozenset({ABS_X, ABS_Y})


def cand(path: str, *, vendor: int = 0x045E, product: int = 0x028E, keys: frozenset[int] = PAD_KEYS,
         axes: frozenset[int] = PAD_AXES) -> PadCandidate:  # fmt: skip
    return PadCandidate(path, f"pad at {path}", vendor, product, keys, axes)


def test_the_first_real_pad_in_device_order_is_chosen() -> None:
    pads = [cand("/dev/input/event10"), cand("/dev/input/event2"), cand("/dev/input/event7")]
    chosen = choose_pad(pads)
    assert chosen is not None and chosen.path == "/dev/input/event2"  # 2 before 7 before 10, not string order


def test_our_own_virtual_pad_is_never_chosen() -> None:
    ours = cand("/dev/input/event1", vendor=0x8998, product=0xFFEE)
    assert choose_pad([ours]) is None
    chosen = choose_pad([ours, cand("/dev/input/event5")])
    assert chosen is not None and chosen.path == "/dev/input/event5"
    # Same vendor, another product: someone else's device, fine.
    assert choose_pad([cand("/dev/input/event1", vendor=0x8998, product=0x0001)]) is not None


def test_keyboards_mice_and_stickless_devices_are_not_pads() -> None:
    keyboard = cand("/dev/input/event0", keys=frozenset({30, 31, 32}), axes=frozenset())
    mouse = cand("/dev/input/event1", keys=frozenset({0x110, 0x111}), axes=frozenset())
    remote = cand("/dev/input/event3", axes=frozenset())  # buttons, no stick
    assert choose_pad([keyboard, mouse, remote]) is None
    assert choose_pad([]) is None


# -- keyboard pad ---------------------------------------------------------------------------------


def test_keyboard_pad_maps_the_documented_keys() -> None:
    k = KeyboardPad()
    assert k.press("D") == PadState(lx=32767)
    assert k.press("W") == PadState(lx=32767, ly=-32767)
    assert k.press("A") == PadState(ly=-32767)  # left and right cancel
    k.release_all()
    assert k.press("Z") == PadState(buttons=GamepadButton.SOUTH)
    assert k.press("SPACE") == PadState(buttons=GamepadButton.SOUTH)
    assert k.release("Z") == PadState(buttons=GamepadButton.SOUTH)  # Space still holds it
    assert k.release("SPACE") == NEUTRAL
    expected = {
        "X": PadState(buttons=GamepadButton.EAST),
        "C": PadState(buttons=GamepadButton.WEST),
        "Y": PadState(buttons=GamepadButton.NORTH),
        "Q": PadState(buttons=GamepadButton.TL),
        "E": PadState(buttons=GamepadButton.TR),
        "G": PadState(buttons=GamepadButton.THUMB_L),
        "H": PadState(buttons=GamepadButton.THUMB_R),
        "ENTER": PadState(buttons=GamepadButton.START),
        "BACKSPACE": PadState(buttons=GamepadButton.SELECT),
        "HOME": PadState(buttons=GamepadButton.MODE),
        "I": PadState(ry=-32767),
        "K": PadState(ry=32767),
        "J": PadState(rx=-32767),
        "L": PadState(rx=32767),
        "UP": PadState(hat_y=-1),
        "DOWN": PadState(hat_y=1),
        "LEFT": PadState(hat_x=-1),
        "RIGHT": PadState(hat_x=1),
        "_1": PadState(lz=255),
        "_3": PadState(rz=255),
    }
    for key, state in expected.items():
        assert k.press(key) == state, key
        assert k.release(key) == NEUTRAL


def test_keys_outside_the_mapping_are_left_to_the_window() -> None:
    k = KeyboardPad()
    for key in ("V", "F", "ESCAPE", "TAB"):
        assert not k.handles(key)
        assert k.press(key) is None and k.release(key) is None
    assert k.state == NEUTRAL


def test_losing_focus_lets_go_of_everything() -> None:
    k = KeyboardPad()
    k.press("W")
    k.press("Z")
    assert k.release_all() == NEUTRAL and k.state == NEUTRAL


def test_merge_ors_buttons_and_keeps_the_larger_deflection() -> None:
    a = PadState(buttons=GamepadButton.SOUTH, lx=1000, ly=-200, lz=10, hat_x=0)
    b = PadState(buttons=GamepadButton.EAST, lx=-32767, ly=100, lz=255, hat_x=-1)
    assert merge(a, b) == PadState(
        buttons=GamepadButton.SOUTH | GamepadButton.EAST, lx=-32767, ly=-200, lz=255, hat_x=-1
    )
    assert merge(a, NEUTRAL) == a == merge(NEUTRAL, a)


# -- sender ---------------------------------------------------------------------------------------


def test_sender_sends_every_interval_and_changes_at_once() -> None:
    s = GamepadSender(PadSenderConfig(interval_s=0.004))
    first = s.poll(NEUTRAL, 10.0)
    assert first is not None and first[0] == 0 and GamepadState.parse(first[1]) == GamepadState(seq=0)
    assert s.poll(NEUTRAL, 10.002) is None  # nothing changed, not due
    change = s.poll(PadState(lx=5), 10.003)
    assert change is not None and GamepadState.parse(change[1]) == GamepadState(seq=1, lx=5)
    assert s.next_timer() == pytest.approx(10.004)  # the change did not move the cadence
    assert s.poll(PadState(lx=5), 10.0039) is None
    again = s.poll(PadState(lx=5), 10.004)
    assert again is not None and again[0] == 2  # the same state again: the reference's steady 250 Hz
    assert s.next_timer() == pytest.approx(10.008)
    assert (s.stats.sent, s.stats.sent_on_change) == (3, 1)


def test_changes_closer_than_the_minimum_gap_wait_for_it() -> None:
    s = GamepadSender(PadSenderConfig(interval_s=0.004, min_gap_s=0.001))
    s.poll(NEUTRAL, 0.0)
    assert s.poll(PadState(lx=1), 0.0015) is not None
    assert s.poll(PadState(lx=2), 0.0020) is None  # 0.5 ms after the last send
    assert s.next_timer() == pytest.approx(0.0025)
    out = s.poll(PadState(lx=2), 0.0025)
    assert out is not None and GamepadState.parse(out[1]).lx == 2
    assert s.next_timer() == pytest.approx(0.004)


def test_late_wake_ups_keep_the_250_hz_cadence() -> None:
    s = GamepadSender(PadSenderConfig(interval_s=0.004))
    now, sent = 0.0, 0
    while now < 4.0:
        sent += s.poll(NEUTRAL, now) is not None
        now = s.next_timer() + 0.0003  # type: ignore[operator]  # every wake-up 0.3 ms late
    assert sent == pytest.approx(1000, abs=2)
    s.poll(NEUTRAL, 10.0)  # a long stall: start over instead of sending a burst to catch up
    assert s.next_timer() == pytest.approx(10.004)


def test_without_send_on_change_a_change_waits_for_the_tick() -> None:
    s = GamepadSender(PadSenderConfig(interval_s=0.004, send_on_change=False))
    s.poll(NEUTRAL, 0.0)
    assert s.poll(PadState(buttons=1), 0.001) is None
    out = s.poll(PadState(buttons=1), 0.004)
    assert out is not None and GamepadState.parse(out[1]).buttons == 1


def test_sender_sequence_wraps_at_16_bits() -> None:
    s = GamepadSender(first_seq=0xFFFE)
    seqs = [s.poll(NEUTRAL, t * 0.004)[0] for t in range(4)]  # type: ignore[index]
    assert seqs == [0xFFFE, 0xFFFF, 0, 1]


# -- virtual pad events ---------------------------------------------------------------------------

EXPECTED_KEY_CODES = {
    GamepadButton.SOUTH: 0x130,
    GamepadButton.EAST: 0x131,
    GamepadButton.WEST: 0x133,  # BTN_X: the reference's deliberate swap
    GamepadButton.NORTH: 0x134,  # BTN_Y
    GamepadButton.TL: 0x136,
    GamepadButton.TR: 0x137,
    GamepadButton.THUMB_L: 0x13D,
    GamepadButton.THUMB_R: 0x13E,
    GamepadButton.START: 0x13B,
    GamepadButton.SELECT: 0x13A,
}


def test_the_virtual_pad_is_the_reference_device() -> None:
    assert (VIRTUAL_PAD.name, VIRTUAL_PAD.bustype) == ("PyroFling virtual gamepad", 0x03)
    assert (VIRTUAL_PAD.vendor, VIRTUAL_PAD.product) == (0x8998, 0xFFEE)
    assert dict(VIRTUAL_PAD.keys) == EXPECTED_KEY_CODES
    assert {code: (lo, hi) for _, code, lo, hi in VIRTUAL_PAD.axes} == {
        0x00: (-32767, 32767),
        0x01: (-32767, 32767),
        0x03: (-32767, 32767),
        0x04: (-32767, 32767),
        0x02: (0, 255),
        0x05: (0, 255),
        0x10: (-1, 1),
        0x11: (-1, 1),
    }


@pytest.mark.parametrize(("bit", "code"), EXPECTED_KEY_CODES.items())
def test_each_button_press_and_release_is_one_key_event_and_a_sync(bit: GamepadButton, code: int) -> None:
    down = PadState(buttons=bit)
    assert pad_events(NEUTRAL, down) == [(EV_KEY, code, 1), SYN]
    assert pad_events(down, NEUTRAL) == [(EV_KEY, code, 0), SYN]


def test_mode_is_not_forwarded_and_nothing_changed_writes_nothing() -> None:
    assert pad_events(NEUTRAL, PadState(buttons=GamepadButton.MODE)) == []
    state = PadState(buttons=GamepadButton.SOUTH, lx=100)
    assert pad_events(state, state) == []


@pytest.mark.parametrize(
    ("name", "code", "value"),
    [("lx", ABS_X, -32767), ("ly", ABS_Y, 123), ("rx", ABS_RX, 32767), ("ry", ABS_RY, -1), ("lz", ABS_Z, 255),
     ("rz", ABS_RZ, 7), ("hat_x", ABS_HAT0X, -1), ("hat_y", ABS_HAT0Y, 1)],
)  # fmt: skip
def test_each_axis_change_is_one_abs_event_and_a_sync(name: str, code: int, value: int) -> None:
    assert pad_events(NEUTRAL, dataclasses.replace(NEUTRAL, **{name: value})) == [(EV_ABS, code, value), SYN]


def test_values_outside_the_device_range_are_clamped() -> None:
    # i16 −32768 is legal on the wire, the device's range stops at −32767; an i8 hat of 5 is clamped to 1.
    assert pad_events(NEUTRAL, PadState(lx=-32768, hat_x=5)) == [(EV_ABS, ABS_X, -32767), (EV_ABS, ABS_HAT0X, 1), SYN]


pad_states = st.builds(
    PadState,
    buttons=st.integers(0, 0x7FF),
    lx=st.integers(-32768, 32767),
    ly=st.integers(-32768, 32767),
    rx=st.sampled_from([0, 5, -32767]),
    ry=st.sampled_from([0, 32767]),
    lz=st.integers(0, 255),
    rz=st.sampled_from([0, 255]),
    hat_x=st.integers(-1, 1),
    hat_y=st.integers(-1, 1),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(pad_states, min_size=1, max_size=12))
def test_replaying_the_events_rebuilds_the_device_state(states: list[PadState]) -> None:
    """What a reader of the virtual pad sees after every sync equals the last state (Mode aside)."""
    device_keys: dict[int, int] = {}
    device_abs: dict[int, int] = {}
    before = NEUTRAL
    for state in states:
        events = pad_events(before, state)
        assert all(e[0] != EV_SYN for e in events[:-1]) and (not events or events[-1] == SYN)
        codes = [(t, c) for t, c, _ in events]
        assert len(codes) == len(set(codes))  # each key/axis at most once per report
        for t, c, v in events[:-1]:
            (device_keys if t == EV_KEY else device_abs)[c] = v
        for bit, code in VIRTUAL_PAD.keys:
            assert device_keys.get(code, 0) == (1 if state.buttons & bit else 0)
        for name, code, lo, hi in VIRTUAL_PAD.axes:
            assert device_abs.get(code, 0) == max(lo, min(hi, getattr(state, name)))
        before = state


# -- ownership and sequence -----------------------------------------------------------------------

TAKEOVER = GamepadButton.START | GamepadButton.SELECT | GamepadButton.TL | GamepadButton.TR


def msg(seq: int, buttons: int = 0, lx: int = 0) -> GamepadState:
    return GamepadState(seq=seq, buttons=buttons, lx=lx)


def test_only_forward_sequences_are_applied() -> None:
    r = GamepadRouter()
    assert r.offer(1, msg(10, lx=1))[0] is PadVerdict.APPLIED
    assert r.offer(1, msg(10, lx=2))[0] is PadVerdict.STALE  # duplicate
    assert r.offer(1, msg(9, lx=3))[0] is PadVerdict.STALE  # reordered, older
    assert r.offer(1, msg(12, lx=4))[0] is PadVerdict.APPLIED  # a gap is fine: 11 was lost
    assert r.offer(1, msg(11, lx=5))[0] is PadVerdict.STALE  # 11 arriving late
    assert r.applied == PadState(lx=4)
    assert r.stats.verdicts == {"applied": 2, "stale_seq": 3}


@pytest.mark.parametrize(
    ("last", "seq", "applied"),
    [(0xFFFF, 0, True), (0xFFF0, 0x0010, True), (5, 5 + 0x7FFF, True), (5, 5 + 0x8000, False), (0, 0xFFFF, False),
     (100, 99, False), (100, 100, False)],
)  # fmt: skip
def test_sequence_comparison_wraps_at_16_bits(last: int, seq: int, applied: bool) -> None:
    r = GamepadRouter()
    r.offer(1, msg(last))
    assert (r.offer(1, msg(seq & 0xFFFF, lx=9))[0] is PadVerdict.APPLIED) is applied


def test_each_connection_has_its_own_sequence() -> None:
    r = GamepadRouter()
    r.offer(1, msg(500))
    r.reset_ownership()
    assert r.offer(2, msg(3))[0] is PadVerdict.APPLIED  # 2's first state: its own numbering


def test_first_sender_owns_and_others_are_refused() -> None:
    r = GamepadRouter()
    verdict, update = r.offer(1, msg(0, buttons=GamepadButton.SOUTH))
    assert verdict is PadVerdict.APPLIED and update is not None and r.owner == 1
    assert update.events == [(EV_KEY, 0x130, 1), SYN] and not update.took_over
    assert r.offer(2, msg(0, buttons=GamepadButton.EAST)) == (PadVerdict.NOT_OWNER, None)
    assert r.applied == PadState(buttons=GamepadButton.SOUTH)


@pytest.mark.parametrize("buttons", [GamepadButton.MODE, TAKEOVER, TAKEOVER | GamepadButton.SOUTH])
def test_mode_or_the_four_button_combo_takes_over(buttons: int) -> None:
    r = GamepadRouter()
    r.offer(1, msg(0, buttons=GamepadButton.SOUTH))
    verdict, update = r.offer(2, msg(0, buttons=buttons))
    assert verdict is PadVerdict.APPLIED and update is not None and update.took_over and r.owner == 2
    assert r.stats.takeovers == 1
    assert r.offer(1, msg(1))[0] is PadVerdict.NOT_OWNER  # the old owner is now the one refused
    assert r.offer(2, msg(1))[0] is PadVerdict.APPLIED  # and the new owner keeps it without the combo


@pytest.mark.parametrize("missing", [GamepadButton.START, GamepadButton.SELECT, GamepadButton.TL, GamepadButton.TR])
def test_three_of_the_four_combo_buttons_do_not_take_over(missing: GamepadButton) -> None:
    r = GamepadRouter()
    r.offer(1, msg(0))
    assert r.offer(2, msg(0, buttons=TAKEOVER & ~missing))[0] is PadVerdict.NOT_OWNER


def test_a_gamepad_kick_clears_ownership() -> None:
    r = GamepadRouter()
    r.offer(1, msg(0))
    r.reset_ownership()
    assert r.owner is None
    assert r.offer(2, msg(0, buttons=GamepadButton.EAST))[0] is PadVerdict.APPLIED and r.owner == 2


def test_an_owner_leaving_lets_go_of_what_it_held() -> None:
    r = GamepadRouter()
    r.offer(1, msg(0, buttons=GamepadButton.SOUTH, lx=300))
    release = r.connection_closed(1)
    assert release is not None and release.conn_id is None and release.state == NEUTRAL
    assert release.events == [(EV_KEY, 0x130, 0), (EV_ABS, ABS_X, 0), SYN]
    assert r.owner is None and r.applied == NEUTRAL
    assert r.offer(2, msg(0))[0] is PadVerdict.APPLIED  # anyone may pick it up


def test_a_non_owner_leaving_changes_nothing_and_its_sequence_is_forgotten() -> None:
    r = GamepadRouter()
    r.offer(1, msg(0, buttons=GamepadButton.SOUTH))
    r.offer(2, msg(50))
    assert r.connection_closed(2) is None and r.owner == 1
    assert r.connection_closed(1) is not None
    assert r.offer(2, msg(3))[0] is PadVerdict.APPLIED  # a new connection with the same id starts over
    assert r.connection_closed(7) is None  # never seen


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(1, 3),
            st.integers(0, 0xFFFF),
            st.sampled_from([0, GamepadButton.SOUTH, GamepadButton.MODE, int(TAKEOVER)]),
            st.booleans(),
        ),
        max_size=60,
    )
)
def test_router_invariants_under_any_traffic(traffic: list[tuple[int, int, int, bool]]) -> None:
    r = GamepadRouter()
    last_seen: dict[int, int] = {}  # a refused state still moves its sender's sequence on
    for conn, seq, buttons, kick in traffic:
        if kick:
            r.reset_ownership()
        owner_before = r.owner
        verdict, update = r.offer(conn, msg(seq, buttons))
        forward = conn not in last_seen or 0 < ((seq - last_seen[conn]) & 0xFFFF) < 0x8000
        if not forward:
            assert verdict is PadVerdict.STALE and update is None
            continue
        last_seen[conn] = seq
        may_drive = owner_before in (None, conn) or buttons & GamepadButton.MODE or buttons & TAKEOVER == TAKEOVER
        assert (verdict is PadVerdict.APPLIED) == bool(may_drive)
        if verdict is PadVerdict.APPLIED:
            assert r.owner == conn and r.applied == PadState.of(msg(seq, buttons))
        else:
            assert r.owner == owner_before
    assert sum(r.stats.verdicts.values()) == len(traffic)


def test_state_roundtrips_through_the_message() -> None:
    state = PadState(buttons=0x7FF, lx=-32768, ly=32767, rx=1, ry=-1, lz=255, rz=0, hat_x=-1, hat_y=1)
    wire = state.message(0x1_0005)  # the sequence is kept to 16 bits
    assert wire.seq == 5 and PadState.of(GamepadState.parse(bytes(wire))) == state
    assert all(state.pressed(b) for b in GamepadButton)
    assert not NEUTRAL.pressed(GamepadButton.SOUTH)
    assert list(itertools.islice(GamepadButton, 3)) == [GamepadButton.SOUTH, GamepadButton.EAST, GamepadButton.WEST]
