"""``--source x11``: a real X server (Xvfb) grabbed with PyAV's x11grab, encoded, streamed and decoded."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

import av
import pytest
from support import stop_viewer_and_host

from pyrofling.client.presenter import HeadlessDisplay
from pyrofling.client.viewer import Viewer, ViewerConfig
from pyrofling.server.encoder import EncoderConfig
from pyrofling.server.gamepad import RecordingPad
from pyrofling.server.host import Host, HostConfig
from pyrofling.server.sources import X11GrabSource, open_source
from pyrofling.server.x11_windows import Window, list_windows, pick_window


@pytest.fixture
def white_screen(x_server: Callable[..., str]) -> str:
    """An X server whose root window is white (-wr)."""
    return x_server("320x240x24", "-wr")


@pytest.mark.io
def test_the_grab_reads_the_whole_screen_on_demand(white_screen: str) -> None:
    source = open_source(f"x11:{white_screen}", 1280, 720)
    try:
        assert isinstance(source, X11GrabSource) and (source.width, source.height) == (320, 240)
        frames = [source.read(i, 0) for i in range(5)]
        assert all(isinstance(f, av.VideoFrame) for f in frames)
        rgb = frames[-1].to_ndarray(format="rgb24")  # type: ignore[union-attr]
        assert rgb.shape == (240, 320, 3) and (rgb > 240).mean() > 0.98  # the white root window (and a cursor)
    finally:
        source.close()


def test_a_display_that_is_not_there_gets_a_clear_error() -> None:
    with pytest.raises(ValueError, match="cannot grab X11 display"):
        open_source("x11::987", 1280, 720)
    env_display = os.environ.pop("DISPLAY", None)
    try:
        with pytest.raises(ValueError, match="needs a display"):
            open_source("x11", 1280, 720)
    finally:
        if env_display is not None:
            os.environ["DISPLAY"] = env_display


class Colours(HeadlessDisplay):
    def __init__(self) -> None:
        self.means: list[float] = []

    def prepare(self, frame: Any) -> Any:
        self.means.append(float(frame.to_ndarray(format="rgb24").mean()))
        return None


@pytest.mark.io
def test_a_grabbed_screen_streams_to_a_viewer(white_screen: str) -> None:
    display = Colours()

    async def scenario() -> dict[str, Any]:
        cfg = HostConfig(
            port=0,
            encoder=EncoderConfig(width=320, height=240, fps=30, bitrate_kbits=500),
            source=f"x11:{white_screen}",
            status_interval_s=0,
        )
        host = Host(cfg, pad=RecordingPad())
        task = asyncio.create_task(host.run())
        await asyncio.wait_for(host.ready.wait(), 15)
        viewer = Viewer(ViewerConfig(host="127.0.0.1", port=host.port or 0), display, run_presenter=True)
        vtask = asyncio.create_task(viewer.run())

        async def enough() -> None:
            while len(display.means) < 15:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(enough(), 20)
        await stop_viewer_and_host(viewer, vtask, host, task)
        return host.summary()

    summary = asyncio.run(scenario())
    assert summary["frames_encoded"] >= 15 and summary["encode_errors"] == 0
    assert min(display.means[-5:]) > 240  # white, through grab, encode, network and decode


# -- one window ----------------------------------------------------------------------------------------


def test_a_window_is_picked_by_id_exact_title_or_unique_part() -> None:
    windows = [Window(0x20002C, "Portal 2 - Vulkan", 1280, 720), Window(0x40000A, "portal", 300, 200)]
    windows.append(Window(0x60000B, "Terminal", 800, 600))
    assert pick_window(windows, "0x40000a").title == "portal"
    assert pick_window(windows, str(0x60000B)).title == "Terminal"
    assert pick_window(windows, "PORTAL").id == 0x40000A  # the exact title wins over the part of another
    assert pick_window(windows, "vulkan").id == 0x20002C
    with pytest.raises(ValueError, match=r"2 windows match 'port'.*give more of the title"):
        pick_window(windows, "port")
    with pytest.raises(ValueError, match=r"no viewable window's title contains 'doom'.*Terminal"):
        pick_window(windows, "doom")
    with pytest.raises(ValueError, match="no viewable window has id 0x99"):
        pick_window(windows, "0x99")


def _open_window(display: str, title: str, colour: int, x: int, y: int, w: int, h: int) -> Any:
    from Xlib import X
    from Xlib import display as xdisplay

    conn = xdisplay.Display(display)
    screen = conn.screen()
    window = screen.root.create_window(x, y, w, h, 0, screen.root_depth, X.InputOutput, background_pixel=colour)
    window.set_wm_name(title.encode("latin-1", "replace").decode("latin-1"))  # old WM_NAME; the UTF-8 one:
    window.change_property(conn.intern_atom("_NET_WM_NAME"), conn.intern_atom("UTF8_STRING"), 8, title.encode())
    window.map()
    conn.sync()
    return conn


@pytest.mark.io
def test_one_window_of_a_screen_is_grabbed_by_its_title(x_server: Callable[..., str]) -> None:
    display = x_server("640x480x24")  # black root: only the window is red
    game = _open_window(display, "Doom Eternal — Vulkan", 0xFF0000, 40, 30, 200, 120)
    other = _open_window(display, "Terminal", 0x00FF00, 300, 200, 100, 100)
    try:
        for _ in range(50):  # mapping is asynchronous
            if any(w.title.startswith("Doom") for w in list_windows(display)):
                break
            time.sleep(0.02)
        source = open_source(f"x11:{display}", 1280, 720, window="doom eternal")
        try:
            assert isinstance(source, X11GrabSource) and (source.width, source.height) == (200, 120)
            frame = [source.read(i, 0) for i in range(3)][-1]
            rgb = frame.to_ndarray(format="rgb24")  # type: ignore[union-attr]
            assert rgb.shape == (120, 200, 3) and (rgb[:, :, 0] > 240).mean() > 0.98 and rgb[:, :, 1].max() < 20
        finally:
            source.close()
        with pytest.raises(ValueError, match="no viewable window's title contains 'quake'"):
            open_source(f"x11:{display}", 1280, 720, window="quake")
    finally:
        game.close()
        other.close()
