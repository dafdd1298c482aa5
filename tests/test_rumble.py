"""Rumble (RUMBLE, protocol.md §7.13): the force-feedback life cycle, routing to the pad's player, the uinput
pad that takes effects from games (against a stand-in of evdev's UInput), the viewer's real pad (a stand-in of
an evdev device), and a real loopback run from a Python game's request to the viewer's pad."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support import TINY, run, start_host, until

from pyrofling.capture import CaptureClient
from pyrofling.client.gamepad import EvdevPadReader, GamepadConfig
from pyrofling.client.viewer import Viewer, ViewerConfig
from pyrofling.core.host.keyframes import KeyframePolicy
from pyrofling.core.host.packetizer import Packetizer
from pyrofling.core.host.sessions import HostSessions, SendControl
from pyrofling.core.input.pad.rumble import FF_GAIN, FF_RUMBLE, STOP, UNTIL_STOPPED_MS, RumbleCommand, RumbleEffects
from pyrofling.core.viewer.reassembler import ProgressCounters
from pyrofling.core.viewer.session import Phase, PlayRumble, ViewerSession, ViewerSessionConfig
from pyrofling.server.gamepad import EvdevFfPad, RecordingPad
from pyrofling.wire import (
    CodecParameters,
    Cookie,
    ExtensionFeature,
    Extensions,
    GamepadState,
    Hello,
    Kick,
    KickFlags,
    Rumble,
    parse_control,
)

# -- the effects' life cycle ----------------------------------------------------------------------


def test_effects_upload_play_stop_erase_and_gain() -> None:
    fx = RumbleEffects(max_effects=2)
    assert not fx.upload(0, 0x51, 100, 100, 50)  # a periodic effect: not a rumble
    assert fx.upload(0, FF_RUMBLE, 40_000, 70_000, 200)  # magnitudes clamped
    assert fx.upload(1, FF_RUMBLE, 1000, 0, 0)  # length 0: until stopped
    assert not fx.upload(2, FF_RUMBLE, 1, 1, 1) and fx.refused == 2  # two effects at most
    assert fx.play(0, 3) == RumbleCommand(40_000, 65_535, 600)  # played three times in a row
    assert fx.play(1, 0) is None  # stopping one that is not playing says nothing
    assert fx.play(0, 0) == STOP and STOP.stop
    assert fx.play(1, 1) == RumbleCommand(1000, 0, UNTIL_STOPPED_MS)
    fx.set_gain(32_768)
    assert fx.play(0, 1) == RumbleCommand(20_000, 32_768, 200)  # the game's gain scales both motors
    assert fx.erase(0) == STOP and fx.erase(1) is None  # erasing the playing effect stops it
    assert fx.play(0, 1) is None  # gone


# -- the host: to the pad's player, sealed like the rest ------------------------------------------

PARAMS = CodecParameters(1, 1, 0, 60, 1, 320, 240, 0, 0)


def test_rumble_goes_to_the_pads_player_only_when_it_asked_for_it() -> None:
    hs = HostSessions(make_packetizer=Packetizer.for_cookie, keyframes=KeyframePolicy())
    hs.codec_parameters = PARAMS
    assert hs.rumble(1, RumbleCommand(1, 2, 3)) == [] and hs.discarded["rumble_no_player"] == 1  # nobody plays
    for conn_id, features in ((1, ExtensionFeature.RUMBLE), (2, ExtensionFeature.NONE)):
        hs.open(conn_id, ("10.0.0.2", 40000 + conn_id), 0.0, cookie=70 + conn_id)
        hs.control(conn_id, Hello(), 0.0)
        hs.control(conn_id, Extensions(1, int(features)), 0.0)
        hs.datagram(("10.0.0.2", 50000 + conn_id), bytes(Cookie(70 + conn_id)), 0.0)
        hs.control(conn_id, Kick(KickFlags.VIDEO | KickFlags.GAMEPAD), 0.0)
    hs.datagram(("10.0.0.2", 50001), bytes(GamepadState(1, 1)), 0.1)  # viewer 1 holds the pad
    [out] = hs.rumble(1, RumbleCommand(30_000, 10_000, 250))
    assert isinstance(out, SendControl) and out.conn_id == 1
    assert parse_control(out.data) == Rumble(1, 0, 30_000, 10_000, 250, 1)
    hs.datagram(("10.0.0.2", 50002), bytes(GamepadState(1, 0x400)), 0.2)  # viewer 2 takes it over (Mode)
    assert hs.rumble(1, RumbleCommand(1, 1, 1)) == [] and hs.discarded["rumble_no_player"] == 2  # it did not ask


def test_the_viewer_plays_rumble_only_when_granted() -> None:
    for granted in (True, False):
        vs = ViewerSession(ProgressCounters(), ViewerSessionConfig(flags=KickFlags.GAMEPAD))
        vs.start(0.0)
        vs.control(Cookie(9), 0.0)
        vs.control(Extensions(1, int(ExtensionFeature.RUMBLE if granted else ExtensionFeature.NONE)), 0.0)
        vs.control(PARAMS, 0.0)
        assert vs.phase is Phase.STREAMING
        out = vs.control(Rumble(1, 0, 5, 6, 100, 1), 0.1)
        assert (out == [PlayRumble(Rumble(1, 0, 5, 6, 100, 1))]) is granted


# -- the host's uinput pad, against a stand-in of evdev's UInput ----------------------------------

EV_FF, EV_UINPUT, UI_FF_UPLOAD, UI_FF_ERASE = 0x15, 0x0101, 1, 2


class FakeUInput:
    """Stands in for evdev.UInput: the events it was made with, what the pad writes, and what a game asks."""

    def __init__(self, events: dict[int, Any], **kwargs: Any) -> None:
        self.events, self.kwargs = events, kwargs
        self.pending: list[Any] = []
        self.written: list[tuple[int, int, int]] = []
        self.answered: list[tuple[str, int]] = []
        self.uploads: dict[int, Any] = {}

    def game_uploads(self, request: int, effect_id: int, kind: int, strong: int, weak: int, length: int) -> None:
        effect = SimpleNamespace(
            id=effect_id,
            type=kind,
            u=SimpleNamespace(ff_rumble_effect=SimpleNamespace(strong_magnitude=strong, weak_magnitude=weak)),
            ff_replay=SimpleNamespace(length=length),
        )
        self.uploads[request] = SimpleNamespace(effect=effect, retval=None)
        self.pending.append(SimpleNamespace(type=EV_UINPUT, code=UI_FF_UPLOAD, value=request))

    def read(self) -> list[Any]:
        out, self.pending = self.pending, []
        return out

    def begin_upload(self, request: int) -> Any:
        return self.uploads[request]

    def end_upload(self, upload: Any) -> None:
        self.answered.append(("upload", upload.retval))

    def begin_erase(self, request: int) -> Any:
        return SimpleNamespace(effect_id=request, retval=None)

    def end_erase(self, erase: Any) -> None:
        self.answered.append(("erase", erase.retval))

    def write(self, t: int, c: int, v: int) -> None:
        self.written.append((t, c, v))

    def syn(self) -> None:
        self.written.append((0, 0, 0))

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        pass


def test_the_uinput_pad_answers_games_and_tells_the_host_what_to_rumble() -> None:
    made: list[FakeUInput] = []

    def make(events: dict[int, Any], **kw: Any) -> FakeUInput:
        made.append(FakeUInput(events, **kw))
        return made[-1]

    pad = EvdevFfPad(make_uinput=make)
    [ui] = made
    assert ui.kwargs["name"] == "PyroFling virtual gamepad" and (ui.kwargs["vendor"], ui.kwargs["product"]) == (
        0x8998,
        0xFFEE,
    )
    assert ui.events[EV_FF] == [FF_RUMBLE, FF_GAIN]
    heard: list[RumbleCommand] = []
    pad._on_rumble = heard.append
    ui.game_uploads(request=7, effect_id=0, kind=FF_RUMBLE, strong=50_000, weak=20_000, length=300)
    ui.game_uploads(request=8, effect_id=1, kind=0x52, strong=1, weak=1, length=1)  # not a rumble: refused
    pad.readable()
    assert ui.answered == [("upload", 0), ("upload", -22)]
    ui.pending = [SimpleNamespace(type=EV_FF, code=0, value=1), SimpleNamespace(type=EV_FF, code=FF_GAIN, value=0)]
    pad.readable()
    ui.pending = [
        SimpleNamespace(type=EV_FF, code=0, value=1),
        SimpleNamespace(type=EV_UINPUT, code=UI_FF_ERASE, value=0),
    ]
    pad.readable()
    assert heard == [RumbleCommand(50_000, 20_000, 300), RumbleCommand(0, 0, 300), STOP]
    pad.write([(1, 0x130, 1), (0, 0, 0)])
    assert ui.written == [(1, 0x130, 1), (0, 0, 0)]


# -- the viewer's real pad, against a stand-in of an evdev device ---------------------------------


class FakePad:
    def __init__(self, rumbles: bool) -> None:
        self.rumbles = rumbles
        self.uploaded: list[Any] = []
        self.written: list[tuple[int, int, int]] = []

    def capabilities(self, **_: Any) -> dict[int, list[int]]:
        return {EV_FF: [FF_RUMBLE]} if self.rumbles else {}

    def upload_effect(self, effect: Any) -> int:
        self.uploaded.append(effect)
        return 3

    def write(self, t: int, c: int, v: int) -> None:
        self.written.append((t, c, v))


def test_the_viewers_pad_plays_and_stops_one_effect_updated_in_place() -> None:
    reader = EvdevPadReader(lambda _s: None, list_devices=lambda: [], open_device=lambda _p: None)
    assert not reader.rumble(1, 1, 10)  # no pad yet
    reader._device = pad = FakePad(rumbles=True)
    assert reader.rumble(40_000, 10_000, 250)
    assert reader.rumble(1000, 0, 0xFFFF)  # until stopped: length 0 for Linux
    assert reader.rumble(0, 0, 0)  # stop
    first, second = pad.uploaded
    assert first.id == -1 and second.id == 3  # a new effect, then the same one updated
    assert first.u.ff_rumble_effect.strong_magnitude == 40_000 and first.ff_replay.length == 250
    assert second.ff_replay.length == 0
    assert pad.written == [(EV_FF, 3, 1), (EV_FF, 3, 1), (EV_FF, 3, 0)]
    reader._device = FakePad(rumbles=False)
    assert not reader.rumble(1, 1, 10)  # a pad with no motors


# -- real loopback: a Python game asks, the viewer's pad hears --------------------------------------


ASKS = 20


@pytest.mark.io
def test_a_python_games_rumble_reaches_the_players_pad_through_the_host(tmp_path: Path) -> None:
    sock, log = str(tmp_path / "cap.sock"), tmp_path / "rumble.jsonl"

    async def scenario() -> tuple[Viewer, int]:
        host, task = await start_host(
            encoder=TINY, pad=RecordingPad(), source="capture", capture_socket=sock, virtual_input="none"
        )
        asked = [0]
        stop = threading.Event()

        def game() -> None:
            client = CaptureClient(64, 64, path=sock, name="rumbler", reconnect_s=0.05)
            try:
                while not stop.is_set():
                    client.present(client.acquire())
                    # someone plays: shake their pad, a fixed number of times well inside the session
                    if host.sessions.gamepad.owner is not None and asked[0] < ASKS:
                        client.rumble(20_000 + asked[0], 5_000, 100)
                        asked[0] += 1
            finally:
                client.close()

        thread = threading.Thread(target=game, daemon=True)
        thread.start()
        viewer = Viewer(
            ViewerConfig(
                host="127.0.0.1",
                port=host.port or 0,
                flags=KickFlags.GAMEPAD,
                gamepad=GamepadConfig(source="sweep", rumble_log=log),
                duration_s=3.0,
            )
        )
        await asyncio.wait_for(viewer.run(), 15)
        stop.set()
        await asyncio.get_running_loop().run_in_executor(None, thread.join, 5)
        await until(lambda: True, 1)
        host.stop()
        await asyncio.wait_for(task, 15)
        return viewer, asked[0]

    viewer, asked = run(scenario)
    heard = [json.loads(line) for line in log.read_text().splitlines()]
    assert asked == ASKS  # the game asked them all while the viewer played (about 27 a second here)
    assert [h["seq"] for h in heard] == list(range(1, ASKS + 1))  # every one, in order (TCP)
    assert [h["strong"] for h in heard] == [20_000 + i for i in range(ASKS)]  # the game's own values
    assert viewer.summary()["gamepad"]["rumbles"] == len(heard)


@pytest.mark.skipif(
    not os.access("/dev/uinput", os.W_OK) or not os.path.isdir("/dev/input"),
    reason="no writable /dev/uinput on this machine (needs the uinput kernel module and access to it)",
)
def test_a_real_game_rumble_on_the_uinput_pad_reaches_the_host() -> None:
    """Plays the game's part with evdev on the real device node: upload an effect, play it."""
    import time

    import evdev
    from evdev import ecodes, ff

    pad = EvdevFfPad()
    heard: list[RumbleCommand] = []
    pad._on_rumble = heard.append
    try:
        time.sleep(0.3)
        devices: list[Any] = [evdev.InputDevice(path) for path in evdev.list_devices()]
        [dev] = [d for d in devices if d.name == "PyroFling virtual gamepad"]
        effect = ff.Effect(
            ecodes.FF_RUMBLE, -1, 0, ff.Trigger(0, 0), ff.Replay(200, 0),
            ff.EffectType(ff_rumble_effect=ff.Rumble(strong_magnitude=30_000, weak_magnitude=1_000)),
        )  # fmt: skip
        done = threading.Event()

        def upload() -> None:
            effect_id = dev.upload_effect(effect)  # blocks until the pad answers
            dev.write(ecodes.EV_FF, effect_id, 1)
            done.set()

        threading.Thread(target=upload, daemon=True).start()
        deadline = time.monotonic() + 3
        while not heard and time.monotonic() < deadline:
            pad.readable()
            time.sleep(0.01)
        assert done.is_set() and heard == [RumbleCommand(30_000, 1_000, 200)]
    finally:
        pad.close()
