"""Keyboard and mouse (protocol.md §7.11): the pure sender and router, the host's rules, and real loopback runs
(a host with a recording keyboard and mouse, a viewer's synthetic player, a Python game on the capture socket)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import TINY, run, start_host, until

from pyrofling.capture import CaptureClient
from pyrofling.client.keyboard_mouse import InputConfig, InputLink
from pyrofling.client.viewer import Viewer, ViewerConfig
from pyrofling.core.host.keyframes import KeyframePolicy
from pyrofling.core.host.packetizer import Packetizer
from pyrofling.core.host.sessions import (
    HostSessionConfig,
    HostSessions,
    KeyboardMouseInput,
    LogLine,
    SendControl,
)
from pyrofling.core.input.keyboard_mouse import WINDOW_KEYS, InputRouter, InputSender, InputVerdict
from pyrofling.core.input.keyboard_mouse.codes import KEY_HOME, KEY_LEFTALT, KEY_LEFTCTRL
from pyrofling.core.input.pad.state import BTN_LEFT, EV_ABS, EV_KEY, EV_REL, EV_SYN, REL_WHEEL, REL_X, REL_Y
from pyrofling.server.input_devices import RecordingInput
from pyrofling.wire import (
    CodecParameters,
    ControlFramer,
    Cookie,
    ExtensionFeature,
    Extensions,
    Hello,
    InputFlags,
    InputState,
    Kick,
    KickFlags,
    key_bitmap,
    parse_udp_control,
)

KEY_A, KEY_W = 30, 17

# -- the viewer's sender --------------------------------------------------------------------------


def test_the_sender_sends_at_once_on_change_and_refreshes_only_while_something_is_held() -> None:
    s = InputSender()
    assert s.poll(0.0) is None and s.next_timer() is None  # nothing yet
    s.key(KEY_W, True)
    first = s.poll(0.0)
    assert first is not None and first.held() == {KEY_W} and first.seq == 0
    assert s.poll(0.005) is None and s.next_timer() == pytest.approx(0.02)
    again = s.poll(0.02)  # held: the same state again, so a lost release cannot leave it held for long
    assert again is not None and again.held() == {KEY_W} and again.seq == 1
    s.key(KEY_W, False)
    released = s.poll(0.021)
    assert released is not None and released.held() == frozenset()
    assert s.next_timer() is None and s.poll(1.0) is None  # nothing held: silence
    s.move(3, -2)
    s.scroll(1)
    moved = s.poll(1.0)
    assert moved is not None and (moved.dx_total, moved.dy_total, moved.wheel_total) == (3, -2, 1)
    assert s.stats.sent == 4 and s.stats.sent_on_change == 3


def test_the_sender_knows_capture_focus_and_the_picture_edges() -> None:
    s = InputSender()
    s.point(1.5, -0.2)  # clamped to the picture
    msg = s.poll(0.0)
    assert msg is not None and msg.flags & InputFlags.ABSOLUTE and (msg.abs_x, msg.abs_y) == (65535, 0)
    s.capture(True)
    s.key(KEY_A, True)
    s.button(0, True)
    msg = s.poll(0.1)
    assert msg is not None and msg.flags == InputFlags.CAPTURED and msg.buttons == 1
    s.release_all()  # focus lost
    msg = s.poll(0.11)
    assert msg is not None and msg.held() == frozenset() and msg.buttons == 0
    s.key(0, True)
    s.key(300, True)  # not keys a state can carry
    s.button(9, True)
    assert s.poll(0.2) is None


def test_window_key_names_map_to_linux_codes() -> None:
    assert WINDOW_KEYS["A"] == 30 and WINDOW_KEYS["Z"] == 44 and WINDOW_KEYS["_1"] == 2 and WINDOW_KEYS["_0"] == 11
    assert WINDOW_KEYS["ENTER"] == WINDOW_KEYS["RETURN"] == 28 and WINDOW_KEYS["LCTRL"] == KEY_LEFTCTRL
    assert WINDOW_KEYS["F1"] == 59 and WINDOW_KEYS["F10"] == 68 and WINDOW_KEYS["F12"] == 88
    assert all(0 < code < 256 for code in WINDOW_KEYS.values())


# -- the host's router ----------------------------------------------------------------------------


def state(seq: int, keys: set[int] = frozenset(), **kw: int) -> InputState:  # type: ignore[assignment]
    return InputState(seq, keys=key_bitmap(set(keys)), **kw)


def test_the_router_writes_only_what_changed_one_report_per_device() -> None:
    r = InputRouter()
    _, u = r.offer(1, state(0, {KEY_W}, buttons=1, dx_total=5, dy_total=-1, wheel_total=2), 0.0)
    assert u is not None
    assert u.keyboard == [(EV_KEY, KEY_W, 1), (EV_SYN, 0, 0)]
    assert u.mouse == [
        (EV_KEY, BTN_LEFT, 1),
        (EV_REL, REL_X, 5),
        (EV_REL, REL_Y, -1),
        (EV_REL, REL_WHEEL, 2),
        (0, 0, 0),
    ]
    _, same = r.offer(1, state(1, {KEY_W}, buttons=1, dx_total=5, dy_total=-1, wheel_total=2), 0.01)
    assert same is not None and same.empty  # a refresh changes nothing
    _, u = r.offer(1, state(2, {KEY_A}, flags=int(InputFlags.ABSOLUTE), abs_x=100, abs_y=200, dx_total=5,
                              dy_total=-1, wheel_total=2), 0.02)  # fmt: skip
    assert u is not None and u.keyboard == [(EV_KEY, KEY_W, 0), (EV_KEY, KEY_A, 1), (EV_SYN, 0, 0)]
    assert u.mouse == [(EV_KEY, BTN_LEFT, 0), (EV_SYN, 0, 0)]
    assert u.pointer == [(EV_ABS, 0, 100), (EV_ABS, 1, 200), (EV_SYN, 0, 0)]
    verdict, none = r.offer(1, state(2, {KEY_W}), 0.03)
    assert verdict is InputVerdict.STALE and none is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-500, 500), st.integers(-500, 500), st.booleans()), min_size=1, max_size=60))
def test_motion_accumulates_exactly_whatever_is_lost_or_reordered(moves: list[tuple[int, int, bool]]) -> None:
    sender, router = InputSender(), InputRouter()
    sent = []
    for i, (dx, dy, _) in enumerate(moves):
        sender.move(dx, dy)
        msg = sender.poll(float(i))
        assert msg is not None or (dx, dy) == (0, 0)
        if msg is not None:
            sent.append(msg)
    rng = random.Random(len(moves))
    arrived = [m for m, (_, _, lost) in zip(sent, moves, strict=False) if not lost] + sent[-1:]
    rng.shuffle(arrived)
    arrived.sort(key=lambda m: m.seq)  # UDP may reorder; stale ones are refused, newer ones carry the totals
    x = y = 0
    for m in arrived:
        _, u = router.offer(1, m, 0.0)
        for kind, code, value in u.mouse if u else []:
            if kind == EV_REL:
                x += value if code == REL_X else 0
                y += value if code == REL_Y else 0
    assert (x, y) == (sum(d[0] for d in moves), sum(d[1] for d in moves))


def test_totals_wrap_at_32_bits_without_a_jump() -> None:
    r = InputRouter()
    r.offer(1, state(0, dx_total=2**31 - 2), 0.0)
    _, u = r.offer(1, state(1, dx_total=-(2**31) + 3), 0.01)  # 5 more, across the wrap
    assert u is not None and (EV_REL, REL_X, 5) in u.mouse


def test_one_owner_ctrl_alt_home_takes_over_without_a_jump_and_a_kick_resets() -> None:
    r = InputRouter()
    r.offer(1, state(0, {KEY_W}), 0.0)
    verdict, _ = r.offer(2, state(0, {KEY_A}, dx_total=1000), 0.01)
    assert verdict is InputVerdict.NOT_OWNER and r.keys == {KEY_W}
    _, u = r.offer(2, state(1, {KEY_LEFTCTRL, KEY_LEFTALT, KEY_HOME}, dx_total=1003), 0.02)
    assert u is not None and u.took_over and r.owner == 2 and r.takeovers == 1
    assert (EV_KEY, KEY_W, 0) in u.keyboard  # the first player's key is let go
    assert (EV_REL, REL_X, 3) in u.mouse  # its motion while it did not own the mouse never lands
    r.reset_ownership()
    verdict, _ = r.offer(1, state(1), 0.03)
    assert verdict is InputVerdict.APPLIED and r.owner == 1


def test_every_key_is_let_go_when_the_player_leaves_or_goes_silent() -> None:
    r = InputRouter(timeout_s=0.5)
    r.offer(1, state(0, {KEY_W, KEY_A}, buttons=1), 0.0)
    assert r.next_timer() == pytest.approx(0.5)
    assert r.handle_timer(0.4) is None
    silent = r.handle_timer(0.5)
    assert silent is not None and silent.conn_id is None and r.timeouts == 1
    assert sorted(silent.keyboard[:-1]) == [(EV_KEY, KEY_W, 0), (EV_KEY, KEY_A, 0)]
    assert silent.mouse == [(EV_KEY, BTN_LEFT, 0), (0, 0, 0)] and r.owner is None
    r.offer(1, state(1, {KEY_W}), 1.0)
    left = r.connection_closed(1)
    assert left is not None and left.keyboard[0] == (EV_KEY, KEY_W, 0)
    assert r.connection_closed(1) is None and r.next_timer() is None
    r.offer(2, state(0, dx_total=4), 2.0)  # nothing held: no timer, nothing to let go
    assert r.next_timer() is None and r.connection_closed(2) is None


# -- the host's rules -----------------------------------------------------------------------------

PARAMS = CodecParameters(1, 1, 0, 60, 1, 320, 240, 0, 0)
UDP = ("10.0.0.2", 40001)


def kicked(hs: HostSessions, conn_id: int, *, extensions: bool = True, flags: KickFlags | None = None) -> None:
    addr = (UDP[0], UDP[1] + conn_id)
    hs.open(conn_id, ("10.0.0.2", 40000 + conn_id), 0.0, cookie=1000 + conn_id)
    hs.control(conn_id, Hello(), 0.0)
    if extensions:
        hs.control(conn_id, Extensions(1, int(ExtensionFeature.KEYBOARD_MOUSE)), 0.0)
    hs.datagram(addr, bytes(Cookie(1000 + conn_id)), 0.0)
    hs.control(conn_id, Kick(flags if flags is not None else KickFlags.VIDEO | KickFlags.KEYBOARD_MOUSE), 0.0)


def host(*, open_keyboard_mouse: bool = True) -> HostSessions:
    """An open host (no password); this one lets every viewer type unless told otherwise."""
    config = HostSessionConfig(open_keyboard_mouse=open_keyboard_mouse)
    hs = HostSessions(make_packetizer=Packetizer.for_cookie, keyframes=KeyframePolicy(), config=config)
    hs.codec_parameters = PARAMS
    return hs


def test_an_open_host_takes_keys_from_nobody_unless_it_says_so() -> None:
    """Another user of the machine (or anyone on the network) connects to an open host and types: by default
    the host does not grant the keyboard, and drops what comes anyway."""
    hs = host(open_keyboard_mouse=False)
    hs.open(9, ("10.0.0.2", 40009), 0.0)
    asked = ExtensionFeature.KEYBOARD_MOUSE | ExtensionFeature.KEYFRAME_REQUEST
    out = hs.control(9, Extensions(1, int(asked)), 0.0)
    [grant] = [m for o in out if isinstance(o, SendControl) for m in ControlFramer().feed(o.data)]
    assert isinstance(grant, Extensions) and grant.feature_flags == ExtensionFeature.KEYFRAME_REQUEST
    kicked(hs, 1)  # negotiates, asks for keys in its KICK: still not granted
    assert hs.datagram((UDP[0], UDP[1] + 1), bytes(state(0, {KEY_W})), 0.1) == []
    assert hs.discarded["input_not_requested"] == 1


def test_keys_reach_the_devices_only_from_a_viewer_that_asked_and_negotiated() -> None:
    hs = host()
    kicked(hs, 1)
    kicked(hs, 2, flags=KickFlags.VIDEO)  # did not ask in its KICK
    kicked(hs, 3, extensions=False, flags=KickFlags.VIDEO | KickFlags.KEYBOARD_MOUSE)  # never negotiated
    msg = bytes(state(0, {KEY_W}))
    assert hs.datagram((UDP[0], UDP[1] + 2), msg, 0.1) == []
    assert hs.datagram((UDP[0], UDP[1] + 3), msg, 0.1) == []
    assert hs.datagram(("6.6.6.6", 9), msg, 0.1) == []  # spoofed: no bound address
    assert hs.discarded["input_not_requested"] == 2 and hs.discarded["unknown_peer"] == 1
    out = hs.datagram((UDP[0], UDP[1] + 1), msg, 0.1)
    assert [type(o) for o in out] == [KeyboardMouseInput, LogLine]
    assert isinstance(out[1], LogLine) and "has the keyboard and mouse" in out[1].text
    # The player leaves: its key is let go.
    left = [o for o in hs.close(1) if isinstance(o, KeyboardMouseInput)]
    assert left and left[0].update.keyboard[0] == (EV_KEY, KEY_W, 0)


def test_the_host_lets_go_of_a_silent_players_keys_on_its_timer() -> None:
    hs = host()
    kicked(hs, 1)
    hs.datagram((UDP[0], UDP[1] + 1), bytes(state(0, {KEY_W})), 1.0)
    assert hs.next_timer() == pytest.approx(1.5)
    out = hs.handle_timer(1.5)
    assert any(isinstance(o, KeyboardMouseInput) and (EV_KEY, KEY_W, 0) in o.update.keyboard for o in out)


def test_input_state_round_trips_and_refuses_bad_lengths() -> None:
    msg = state(7, {1, 30, 255}, buttons=0x1F, flags=3, dx_total=-5, wheel_total=2**31 - 1, abs_x=65535)
    back = parse_udp_control(bytes(msg))
    assert back == msg and isinstance(back, InputState) and back.held() == {1, 30, 255}


# -- real loopback ----------------------------------------------------------------------------------


@pytest.mark.io
def test_a_viewers_keys_and_mouse_reach_the_hosts_devices_and_a_python_game(tmp_path: Path) -> None:
    devices = RecordingInput()
    sock = str(tmp_path / "cap.sock")

    async def scenario() -> tuple[Viewer, dict[str, int], InputLink]:
        host, task = await start_host(
            encoder=TINY,
            source="capture",
            capture_socket=sock,
            virtual_pad="none",
            input_devices=devices,
            open_keyboard_mouse=True,
        )
        game_saw: dict[str, int] = {"keys_events": 0, "dy": 0}
        stop = threading.Event()
        game_joined = threading.Event()

        def game() -> None:
            client = CaptureClient(64, 64, path=sock, name="kbm-game", reconnect_s=0.05)
            try:
                while not stop.is_set():
                    client.present(client.acquire())
                    game_joined.set()
                    _, dy, _, _ = client.take_motion()
                    game_saw["dy"] += dy
                    game_saw["keys_events"] += bool(client.keys_held)
            finally:
                client.close()

        thread = threading.Thread(target=game, daemon=True)
        thread.start()
        # The game gets the motion applied after it joined: the viewer starts moving the mouse once it is in.
        await until(game_joined.is_set, 10)
        cfg = ViewerConfig(
            host="127.0.0.1",
            port=host.port or 0,
            flags=KickFlags.VIDEO | KickFlags.KEYBOARD_MOUSE,
            keyboard_mouse=InputConfig(source="sweep", sweep_interval_ms=4.0),
            duration_s=3.0,
        )
        viewer = Viewer(cfg)
        assert viewer.keyboard_mouse is not None
        # The sweep stops half a second before the viewer leaves: its last state (UDP) could otherwise cross the
        # viewer's goodbye (TCP), and a host that saw the owner go first rightly ignores it (seen once under load).
        stop_sweep = asyncio.get_running_loop().call_later(2.5, viewer.keyboard_mouse.detach)
        await asyncio.wait_for(viewer.run(), 20)
        stop_sweep.cancel()
        await until(lambda: host.sessions.input.owner is None, 5)  # the viewer left: everything let go
        assert viewer.keyboard_mouse is not None
        sent_dy = viewer.keyboard_mouse.sender.dy_total
        # The game takes its motion once a frame: the last of it may still be on its way (the check below says
        # what arrived if it never does).
        with contextlib.suppress(TimeoutError):
            await until(lambda: game_saw["dy"] == sent_dy, 5)
        stop.set()
        await asyncio.get_running_loop().run_in_executor(None, thread.join, 5)
        host.stop()
        await asyncio.wait_for(task, 15)
        assert viewer.keyboard_mouse is not None
        return viewer, game_saw, viewer.keyboard_mouse

    viewer, game_saw, link = run(scenario)
    sent = link.sender
    assert viewer.summary()["keyboard_mouse"]["states_sent"] > 200
    keys = devices.of("keyboard")
    assert len(keys) > 100 and {c for _, c, _ in keys} <= set(range(30, 39))
    rel_x = sum(v for t, c, v in devices.of("mouse") if t == EV_REL and c == REL_X)
    rel_y = sum(v for t, c, v in devices.of("mouse") if t == EV_REL and c == REL_Y)
    assert (rel_x, rel_y) == (sent.dx_total, sent.dy_total)  # over real UDP, not a pixel of drift
    held: set[int] = set()
    for _, code, value in keys:
        (held.add if value else held.discard)(code)
    assert held == set()  # nothing stays held after the viewer leaves
    # The Python game saw the keys held and the same motion, through the capture socket.
    assert game_saw["keys_events"] > 10 and game_saw["dy"] == sent.dy_total > 100


def test_an_update_after_one_that_was_never_read_carries_both_motions_and_the_newest_state() -> None:
    from pyrofling.core.input.keyboard_mouse import InputUpdate

    earlier = InputUpdate(1, [], [], [], dx=3, dy=-2, wheel=1, keys=frozenset({30}), buttons=1)
    later = InputUpdate(1, [], [], [], dx=1, dy=5, hwheel=2, keys=frozenset({31}), absolute=(10, 20))
    merged = later.after(earlier)
    assert (merged.dx, merged.dy, merged.wheel, merged.hwheel) == (4, 3, 1, 2)
    assert merged.keys == frozenset({31}) and merged.buttons == 0 and merged.absolute == (10, 20)


# -- the uinput adapter -----------------------------------------------------------------------------


def test_uinput_input_makes_three_devices_and_writes_each_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uinput
    from test_gamepad_io import RecordingUinputDevice

    from pyrofling.server.input_devices import UinputInput

    RecordingUinputDevice.created.clear()
    monkeypatch.setattr(uinput, "Device", RecordingUinputDevice)
    node = tmp_path / "uinput"
    node.write_bytes(b"")  # a writable file stands in for the device node
    devices = UinputInput(path=str(node))
    keyboard, mouse_dev, pointer = RecordingUinputDevice.created
    assert [d.kwargs["name"] for d in (keyboard, mouse_dev, pointer)] == [
        "PyroFling virtual keyboard",
        "PyroFling virtual mouse",
        "PyroFling virtual pointer",
    ]
    assert [d.kwargs["product"] for d in (keyboard, mouse_dev, pointer)] == [0xFFE0, 0xFFE1, 0xFFE2]
    assert (EV_KEY, KEY_W) in keyboard.capabilities and (EV_KEY, 248) in keyboard.capabilities
    assert (EV_REL, REL_X) in mouse_dev.capabilities and (EV_KEY, BTN_LEFT) in mouse_dev.capabilities
    assert (EV_ABS, 0, 0, 65535, 0, 0) in pointer.capabilities
    router = InputRouter()
    _, u = router.offer(1, state(0, {KEY_W}, buttons=1, dx_total=3), 0.0)
    assert u is not None
    from pyrofling.server.input_devices import InputOutput

    out = InputOutput(devices)
    out.apply(u)
    assert keyboard.calls == [("emit", (EV_KEY, KEY_W), 1, False), ("syn",)]
    assert mouse_dev.calls == [("emit", (EV_KEY, BTN_LEFT), 1, False), ("emit", (EV_REL, REL_X), 3, False), ("syn",)]
    assert pointer.calls == []  # nothing to say: no write at all
    out.close()
    assert all(d.calls[-1] == ("destroy",) for d in (keyboard, mouse_dev, pointer))


@pytest.mark.skipif(
    not os.access("/dev/uinput", os.W_OK) or not os.path.isdir("/dev/input"),
    reason="no writable /dev/uinput on this machine (needs the uinput kernel module and access to it)",
)
def test_real_uinput_keyboard_and_mouse_report_what_was_written() -> None:
    import time

    import evdev

    from pyrofling.server.input_devices import UinputInput

    devices = UinputInput()
    try:
        time.sleep(0.3)  # udev creates the event nodes
        found = {d.name: d for d in (evdev.InputDevice(p) for p in evdev.list_devices())}
        kb, ms = found["PyroFling virtual keyboard"], found["PyroFling virtual mouse"]
        devices.write("keyboard", [(EV_KEY, KEY_W, 1), (EV_SYN, 0, 0)])
        devices.write("mouse", [(EV_REL, REL_X, 7), (EV_SYN, 0, 0)])
        time.sleep(0.05)
        assert [(e.type, e.code, e.value) for e in kb.read() if e.type == EV_KEY] == [(EV_KEY, KEY_W, 1)]
        assert [(e.type, e.code, e.value) for e in ms.read() if e.type == EV_REL] == [(EV_REL, REL_X, 7)]
    finally:
        devices.close()
