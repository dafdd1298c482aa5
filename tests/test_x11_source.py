"""``--source x11``: a real X server (Xvfb) grabbed with PyAV's x11grab, encoded, streamed and decoded."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import av
import pytest

from pyrofling.client.presenter import HeadlessDisplay
from pyrofling.client.viewer import Viewer, ViewerConfig
from pyrofling.server.encoder import EncoderConfig
from pyrofling.server.gamepad import RecordingPad
from pyrofling.server.host import Host, HostConfig
from pyrofling.server.sources import X11GrabSource, open_source


@pytest.fixture
def white_screen(x_server: Callable[..., str]) -> str:
    """An X server whose root window is white (-wr)."""
    return x_server("320x240x24", "-wr")


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
        viewer.stop()
        await asyncio.wait_for(vtask, 10)
        host.stop()
        await asyncio.wait_for(task, 10)
        return host.summary()

    summary = asyncio.run(scenario())
    assert summary["frames_encoded"] >= 15 and summary["encode_errors"] == 0
    assert min(display.means[-5:]) > 240  # white, through grab, encode, network and decode
