"""``host --source wayland``: a desktop a person sits at, shared through the real desktop portal.

The "person's desktop" is a headless GNOME mutter started by the test, with a monitor
(a recorded virtual one, as that is how headless mutter has a monitor), the real
``xdg-desktop-portal`` and ``xdg-desktop-portal-gnome`` activated on its bus, and a
program on its screen whose picture is known (``pyrofling.bench.marker_window``).
The portal's "Screen Share" dialog is answered as a person would, with the pointer
(mutter's RemoteDesktop, clicking the monitor and then Share); the second start
with the kept restore token must need no answer at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dbus_fast import Message
from support import complete_lines, ours, run, stop_host, type_until_seen, until

from pyrofling.client.keyboard_mouse import InputConfig
from pyrofling.client.viewer import Viewer, ViewerConfig
from pyrofling.core.host.headless import RemoteCall, recording_caps
from pyrofling.core.host.portal import (
    first_stream,
    portal_input_call,
    request_path,
    response_problem,
    select_devices,
    select_sources,
)
from pyrofling.pairing import PortalToken
from pyrofling.server.config import HostConfig
from pyrofling.server.encoder import EncoderConfig
from pyrofling.server.host import Host
from pyrofling.wire import KickFlags

PORTAL_PROGRAMS = ("/usr/libexec/xdg-desktop-portal", "/usr/libexec/xdg-desktop-portal-gnome")
#: Where GNOME's dialog puts the monitor's row and the Share button on a 1280x720 screen (xdg-desktop-portal-gnome 43).
MONITOR_ROW, SHARE = (640, 385), (852, 232)
#: The "Remote desktop" dialog's switch that lets the host type and point.
ALLOW_INTERACTION = (830, 432)


def test_the_portal_requests_say_what_is_asked_and_what_the_answers_mean() -> None:
    assert request_path(":1.42", "tok") == "/org/freedesktop/portal/desktop/request/1_42/tok"
    options = select_sources("embedded", None)
    assert options == {"types": ("u", 1), "multiple": ("b", False), "cursor_mode": ("u", 2), "persist_mode": ("u", 2)}
    assert select_sources("hidden", "abc")["restore_token"] == ("s", "abc")
    assert select_sources("hidden", None)["cursor_mode"] == ("u", 1)
    with pytest.raises(ValueError, match="embedded or hidden"):
        select_sources("metadata", None)
    assert response_problem(0, "Start") is None
    assert "declined" in (response_problem(1, "Start") or "")
    assert "could not Start" in (response_problem(2, "Start") or "")
    stream = first_stream({"streams": [[50, {"id": "0", "size": [1280, 720]}]], "restore_token": "t"})
    assert (stream.node, stream.width, stream.height) == (50, 1280, 720)
    with pytest.raises(ValueError, match="no stream"):
        first_stream({"streams": []})


def test_keys_and_the_pointer_become_the_remote_desktop_portals_calls_on_its_session_and_stream() -> None:
    """The same translation as the headless desktop's (mutter's calls), in the portal's form: the session and an
    options dict first, states as numbers, absolute positions on the shared stream's node."""
    session = "/org/freedesktop/portal/desktop/session/1_2/s"
    key = portal_input_call(RemoteCall("NotifyKeyboardKeycode", "ub", (30, True)), session, 50)
    assert key == RemoteCall("NotifyKeyboardKeycode", "oa{sv}iu", (session, {}, 30, 1))
    at = portal_input_call(RemoteCall("NotifyPointerMotionAbsolute", "sdd", ("/stream", 10.0, 20.0)), session, 50)
    assert at == RemoteCall("NotifyPointerMotionAbsolute", "oa{sv}udd", (session, {}, 50, 10.0, 20.0))
    moved = portal_input_call(RemoteCall("NotifyPointerMotionRelative", "dd", (1.0, -2.0)), session, 50)
    assert moved == RemoteCall("NotifyPointerMotion", "oa{sv}dd", (session, {}, 1.0, -2.0))
    wheel = portal_input_call(RemoteCall("NotifyPointerAxisDiscrete", "ui", (0, -1)), session, 50)
    assert wheel == RemoteCall("NotifyPointerAxisDiscrete", "oa{sv}ui", (session, {}, 0, -1))
    button = portal_input_call(RemoteCall("NotifyPointerButton", "ib", (272, False)), session, 50)
    assert button.args == (session, {}, 272, 0)
    # A portal of version 1 cannot remember remote interaction: it is asked at each start, and told nothing else.
    assert select_devices("tok", 1) == {"types": ("u", 3)}
    assert select_devices("tok", 2)["restore_token"] == ("s", "tok")
    assert "persist_mode" not in select_sources("embedded", "tok", remember=False)


def test_the_restore_token_is_kept_only_for_this_user_and_replaced_by_each_start(tmp_path: Path) -> None:
    tokens = PortalToken(tmp_path / "conf")
    assert tokens.get() is None
    tokens.put("first")
    tokens.put("second")
    assert PortalToken(tmp_path / "conf").get() == "second"
    path = tmp_path / "conf" / "portal.json"
    assert path.stat().st_mode & 0o077 == 0 and json.loads(path.read_text())["screen_cast_restore_token"] == "second"


def _need_a_portal() -> None:
    missing = [p for p in PORTAL_PROGRAMS if not Path(p).exists()]
    missing += [p for p in ("mutter", "pipewire", "wireplumber", "Xwayland") if shutil.which(p) is None]
    if missing:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(f"needs {', '.join(missing)} (scripts/setup)")


@pytest.fixture
def gnome(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The person's desktop is GNOME: the portal picks its GNOME backend."""
    monkeypatch.setenv("XDG_CURRENT_DESKTOP", "GNOME")
    yield


def _markers(path: Path) -> list[int]:
    return [line["id"] for line in complete_lines(path)]


class _PersonsDesktop:
    """A GNOME desktop a person sits at: headless mutter with a monitor (a recorded virtual one: headless mutter
    has one only while it is recorded), the real portal on its bus, and the person's mouse (mutter's
    RemoteDesktop). The host under test reaches it through ``DBUS_SESSION_BUS_ADDRESS``."""

    async def start(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from pyrofling.server.headless.desktop import HeadlessDesktop
        from pyrofling.server.headless.frames import MonitorFrames
        from pyrofling.server.headless.screencast import VirtualMonitor

        self.desktop = HeadlessDesktop()
        self.screen: MonitorFrames | None = None
        await self.desktop.start()
        assert self.desktop.bus is not None
        self.monitor = VirtualMonitor(self.desktop.bus)
        node = await self.monitor.start()
        self.screen = MonitorFrames(self.desktop.pipewire_socket, node, recording_caps(1280, 720, 30), (1280, 720))
        self.screen.start()
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", self.desktop.env["DBUS_SESSION_BUS_ADDRESS"])

    async def click(self, x: int, y: int) -> None:
        bus = self.desktop.bus
        assert bus is not None
        for member, signature, body in (
            ("NotifyPointerMotionAbsolute", "sdd", [self.monitor.stream_path, float(x), float(y)]),
            ("NotifyPointerButton", "ib", [272, True]),
            ("NotifyPointerButton", "ib", [272, False]),
        ):
            call = Message(destination="org.gnome.Mutter.RemoteDesktop", path=self.monitor.session_path,
                           interface="org.gnome.Mutter.RemoteDesktop.Session", member=member,
                           signature=signature, body=body)  # fmt: skip
            await bus.call(call)
            await asyncio.sleep(0.05)

    def switch_shows(self, x: int, y: int) -> str | None:
        """What the dialog's switch at (x, y) shows, as a person sees it: "on" (GNOME's blue track), "off" (a grey
        one on the light dialog), or None while no dialog is up (the desktop's dark blue, or no picture yet)."""
        assert self.screen is not None
        frame, _ = self.screen.latest()
        if frame is None:
            return None
        patch = frame.to_ndarray(format="rgb24")[y - 12 : y + 12, x - 30 : x + 30].astype(int)
        red, blue = patch[..., 0], patch[..., 2]
        if int(((blue > 200) & (red < 100)).sum()) > 100:
            return "on"
        return "off" if patch.mean() > 200 else None

    async def answer(
        self, host: Host, task: asyncio.Task[Any], clicks: list[tuple[int, int]], switch: tuple[int, int] | None = None
    ) -> None:
        """Click through the portal's dialog until the host has its stream (it asks again while nobody has); with a
        ``switch``, it is turned on first (only while the screen shows it off: a second click turns it off again),
        and the rest is clicked once it shows on."""
        for _ in range(120):
            if host.ready.is_set() or task.done():
                break
            if switch is not None:
                if self.switch_shows(*switch) == "off":
                    await self.click(*switch)
                    for _ in range(20):  # until the screen shows the click
                        await asyncio.sleep(0.1)
                        if self.switch_shows(*switch) == "on":
                            break
                if self.switch_shows(*switch) != "on":
                    await asyncio.sleep(0.25)
                    continue
            for x, y in clicks:
                await self.click(x, y)
            await asyncio.sleep(0.25)
        await asyncio.wait_for(host.ready.wait(), 5)

    def close(self) -> None:
        if self.screen is not None:
            self.screen.stop()
        self.desktop.close()


def _wayland_host(conf: Path, **config: Any) -> tuple[Host, asyncio.Task[Any]]:
    encoder = EncoderConfig(width=1280, height=720, fps=30, bitrate_kbits=3000)
    host = Host(HostConfig(port=0, source="wayland", pairing_dir=conf, virtual_pad="none", status_interval_s=0,
                           encoder=encoder, **config))  # fmt: skip
    return host, asyncio.create_task(host.run())


async def _watch(host: Host, markers: Path) -> list[int]:
    """Watch until 20 of the program's pictures came (a loaded machine draws them slowly), at most 30 s."""
    viewer = Viewer(ViewerConfig(host="127.0.0.1", port=host.port or 0, duration_s=30, flags=KickFlags.VIDEO,
                                 marker_log=markers))  # fmt: skip
    watching = asyncio.create_task(viewer.run())
    with contextlib.suppress(TimeoutError):
        await until(lambda: len(set(_markers(markers))) >= 20 or watching.done(), 30)
    viewer.stop()
    await asyncio.wait_for(watching, 10)
    return _markers(markers)


@pytest.mark.io
@pytest.mark.desktop
def test_the_desktop_you_sit_at_is_shared_once_asked_and_the_next_start_asks_nothing(
    tmp_path: Path, gnome: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """First start: the portal asks, the person clicks the monitor and Share, the stream shows the program on that
    monitor (its own frame markers, counting up) and the restore token is kept beside the pairings. Second start,
    with the same pairing folder: nobody clicks, and the stream comes all the same; when the desktop's portal goes
    away, the host says so and stops, by itself."""
    _need_a_portal()
    conf = tmp_path / "conf"

    async def scenario() -> tuple[list[int], list[int], str | None]:
        person = _PersonsDesktop()
        try:
            await person.start(monkeypatch)
            host, task = _wayland_host(conf)
            await person.answer(host, task, [MONITOR_ROW, SHARE])
            person.desktop.run(f"{sys.executable} -m pyrofling.bench.marker_window --fps 30")
            first = await _watch(host, tmp_path / "first.jsonl")
            await stop_host(host, task)
            token = PortalToken(conf).get()
            host, task = _wayland_host(conf)  # again: no click this time
            await asyncio.wait_for(host.ready.wait(), 30)
            second = await _watch(host, tmp_path / "second.jsonl")
            # The desktop ends the share (its portal goes away, as when the person stops sharing): the stream ends.
            for pid in _processes_named("xdg-desktop-portal-gnome"):
                os.kill(pid, signal.SIGKILL)
            await asyncio.wait_for(task, 30)
        finally:
            person.close()
        return first, second, token

    caplog.set_level(logging.WARNING, "pyrofling")
    first, second, token = run(scenario, timeout_s=180)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("wayland:")]
    assert len(said) == 1 and said[0].endswith("the stream ends"), said
    assert token, "no restore token was kept"
    for ids in (first, second):  # the program's own pictures, in order, many of them
        assert len(set(ids)) >= 20, ids[:10]
        assert all(b >= a for a, b in itertools.pairwise(ids))


@pytest.mark.io
@pytest.mark.desktop
def test_keys_reach_the_desktop_through_its_remote_desktop_portal_once_the_person_allows_it(
    tmp_path: Path, gnome: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--virtual-input portal``: the desktop's "Remote desktop" dialog; the person allows remote interaction and
    shares; a viewer's keys reach the program on the desktop's screen, and its picture comes (no uinput)."""
    _need_a_portal()
    events = tmp_path / "events.jsonl"

    async def scenario() -> tuple[list[dict[str, Any]], list[int], str]:
        person = _PersonsDesktop()
        try:
            await person.start(monkeypatch)
            host, task = _wayland_host(tmp_path / "conf", virtual_input="portal", open_keyboard_mouse=True)
            await person.answer(host, task, [SHARE], switch=ALLOW_INTERACTION)
            person.desktop.run(f"{sys.executable} -m pyrofling.bench.marker_window --fps 30 --events {events}")
            viewer = Viewer(ViewerConfig(host="127.0.0.1", port=host.port or 0, duration_s=60,
                                         marker_log=tmp_path / "markers.jsonl", keyboard_mouse=InputConfig(),
                                         flags=KickFlags.VIDEO | KickFlags.KEYBOARD_MOUSE))  # fmt: skip
            watching = asyncio.create_task(viewer.run())
            link = viewer.keyboard_mouse
            assert link is not None
            await type_until_seen(link, lambda: any(e.get("key") == "A" and e["down"] for e in _events(events)))
            await until(lambda: len(set(_markers(tmp_path / "markers.jsonl"))) >= 10, 30)  # and its picture
            viewer.stop()
            await asyncio.wait_for(watching, 10)
            devices = host.summary()["keyboard_mouse"]["devices"]
            await stop_host(host, task)
        finally:
            person.close()
        return _events(events), _markers(tmp_path / "markers.jsonl"), devices

    seen, ids, devices = run(scenario, timeout_s=180)
    assert devices.startswith("the desktop's keyboard and pointer (the RemoteDesktop portal)")
    assert any(e.get("key") == "A" and e["down"] for e in seen)
    assert len(set(ids)) >= 10


def _processes_named(name: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == name[:15] and ours(int(pid)):
                found.append(int(pid))
    return found


def _events(path: Path) -> list[dict[str, Any]]:
    return complete_lines(path)


def _host_says(env: dict[str, str]) -> tuple[int, list[str]]:
    done = subprocess.run([sys.executable, "-m", "pyrofling", "host", "--source", "wayland", "--port", "0"],
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    return done.returncode, [line for line in done.stderr.splitlines() if "Failed to set fd limit" not in line]


@pytest.mark.io
@pytest.mark.desktop
def test_without_a_desktop_session_or_its_portal_the_host_says_what_to_do_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DBUS_SESSION_BUS_ADDRESS"}
    code, said = _host_says(env)
    assert code != 0 and len(said) == 1 and "DBUS_SESSION_BUS_ADDRESS is unset" in said[0], said
    # A session bus that knows no portal (a desktop without xdg-desktop-portal installed).
    if shutil.which("dbus-daemon") is None:
        pytest.skip("needs dbus-daemon (scripts/setup)")
    config = tmp_path / "bus.conf"
    address = f"unix:path={tmp_path / 'bus'}"
    config.write_text(
        '<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN" '
        '"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">'
        f"<busconfig><type>session</type><listen>{address}</listen><policy context='default'>"
        "<allow send_destination='*' eavesdrop='true'/><allow eavesdrop='true'/><allow own='*'/></policy></busconfig>"
    )
    bus = subprocess.Popen(["dbus-daemon", f"--config-file={config}", "--nofork", "--print-address=1"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        assert bus.stdout is not None and bus.stdout.readline()  # it says its address once it listens
        code, said = _host_says({**env, "DBUS_SESSION_BUS_ADDRESS": address})
    finally:
        bus.terminate()
        bus.wait(5)
    assert code != 0 and len(said) == 1, said
    assert "no desktop portal" in said[0] and "apt-get install xdg-desktop-portal" in said[0]
