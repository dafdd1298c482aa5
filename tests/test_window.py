"""The pyglet viewer window on a real X server (Xvfb, the ``xvfb`` fixture), checked by a screenshot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import av
import numpy as np
import pytest

from pyrofling.bench.stream import _wait_for_port, free_port
from pyrofling.core.scene import BARS_RGB

#: The window's tests present on a display's refresh through pyglet's one X connection per process: they run with
#: the clocked tests, one at a time (beside the worker pool, a worker died in one of them twice, with no Python
#: error, in two runs of the whole suite: pyglet's display connection is process-wide).
pytestmark = pytest.mark.realtime


@pytest.mark.io
def test_window_shows_the_test_scene(xvfb: str, tmp_path: Path) -> None:
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1", DISPLAY=xvfb)
    host = subprocess.Popen(
        [
            *(sys.executable, "-m", "pyrofling", "host", "-q", "--port", str(port), "--width", "640"),
            *("--height", "360", "--fps", "30", "--bitrate-kbits", "2000", "--duration", "30"),
        ],
        env=env,
    )
    shot = tmp_path / "window.png"
    try:
        _wait_for_port(port, host, timeout_s=30)  # a loaded machine may take a while to start the host
        view = subprocess.run(
            [
                *(sys.executable, "-m", "pyrofling", "view", f"pyro://127.0.0.1:{port}", "-q"),
                *("--duration", "3", "--screenshot", str(shot)),
            ],
            env=env,
            timeout=60,
            capture_output=True,
            text=True,
        )
    finally:
        host.terminate()
        host.wait(15)
    assert view.returncode == 0, view.stderr
    with av.open(str(shot)) as container:
        image = next(container.decode(video=0)).to_ndarray(format="rgb24")
    h, w, _ = image.shape
    # The window scales 640x360 to fill 1280x720: the seven colour bars span its lower half.
    row = image[int(h * 0.8)]
    for i, rgb in enumerate(BARS_RGB):
        x = int((i + 0.5) * w / len(BARS_RGB))
        expected = np.array(rgb) * 255
        assert np.abs(row[x].astype(float) - expected).max() < 40, (i, row[x], expected)


@pytest.mark.io
def test_v_toggles_the_overlay_with_its_graphs(xvfb: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISPLAY", xvfb)
    from pyglet.window import key

    from pyrofling.client.presenter import HeadlessDisplay, Presenter
    from pyrofling.client.window import ViewerWindow
    from pyrofling.core.viewer.presentation import PresentationConfig

    presenter = Presenter(PresentationConfig(phase_locked=True), HeadlessDisplay())
    st = presenter.stats
    st.graph_phase_ms.extend([0.5, -0.3, 0.2])
    st.graph_pace_ms.extend([16.7, 16.6, 16.7])
    st.graph_glass_ms.extend([25.0, 26.0, 24.0])
    st.graph_repeat.extend([False, True, False])

    class Audio:
        def live(self) -> dict[str, object]:
            return {
                "buffered_ms": 30.2,
                "speed_ppm": 512.0,
                "target_ms": 30.0,
                "underruns": 0,
                "latency_ms": 36.5,
                "recent_buffered_ms": [29.0, 30.5, 30.2],
                "error": None,
            }

    class Stats:
        codec_parameters = None
        state = "connecting to 127.0.0.1 port 9876…"

        def __init__(self) -> None:
            self.presenter = presenter
            self.audio = Audio()

        def summary(self, *, live: bool = False) -> dict[str, object]:
            assert live  # the overlay must not ask for the costly samples and audio statistics
            return {
                "frames_shown": 10,
                "received_mbits": 7.5,
                "decode_ms_median": 1.0,
                "rtt_ms": 0.3,
                "presentation": {"presented": 9, "repeated": 2, "missed_deadlines": 1, "refresh_hz": 59.94},
                "gamepad": {"pad": None, "states_sent": 250},
                "security": {"sealed": True, "text": "sealed, authenticated with a stored pairing"},
            }

    window = ViewerWindow()
    try:
        assert not window.vsync_blocks  # Xvfb's flips do not wait for a refresh
        window.stats_source = cast(Any, Stats())  # what the overlay reads of a viewer
        assert not window.hud_visible
        window._on_key(key.V, 0)
        assert window.hud_visible
        text = window._hud.text
        assert "frames decoded: 10" in text and "7.50 Mbit/s" in text
        assert "repeated 2, missed deadline 1" in text and "59.94 Hz" in text
        assert "audio 30.2 ms buffered (target 30), speed +512 ppm, underruns 0, click latency 36 ms" in text
        assert "gamepad: window keys, 250 states sent" in text
        assert "sealed, authenticated with a stored pairing" in text
        labels = [s.text for s in window._graphs.shapes if hasattr(s, "text")]
        assert [label.split(":")[0] for label in labels] == [
            "phase error",
            "frame pace",
            "capture->on screen",
            "repeated refreshes",
            "audio buffer",
        ]
        assert "phase error: 0.13 ms" in labels  # the average of the samples shown
        window.present(None)  # draws the overlay without a picture, and what the viewer is doing
        assert window._status.text == "connecting to 127.0.0.1 port 9876…"
        window._on_key(key.V, 0)
        assert not window.hud_visible
    finally:
        window.close()


@pytest.mark.io
def test_the_keyboard_is_a_pad_when_the_viewer_sends_one(xvfb: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISPLAY", xvfb)
    from pyglet.window import key

    from pyrofling.client.window import ViewerWindow

    class Link:
        def __init__(self) -> None:
            self.calls: list[tuple[str, bool]] = []
            self.released = 0

        def key(self, name: str, down: bool) -> bool:
            self.calls.append((name, down))
            return name in ("Z", "Q", "W")

        def release_keys(self) -> None:
            self.released += 1

    closed: list[bool] = []
    window = ViewerWindow()
    try:
        window.on_close_requested = lambda: closed.append(True)
        link = Link()
        window.gamepad = link
        window._on_key(key.Z, 0)
        window._on_key_release(key.Z, 0)
        window._on_key(key.Q, 0)  # L1 now, not quit
        assert link.calls == [("Z", True), ("Z", False), ("Q", True)] and not closed
        window._on_key(key.V, 0)  # not a pad key: still the overlay
        assert window.hud_visible
        window._on_deactivate()
        assert link.released == 1
        window._on_key(key.ESCAPE, 0)
        assert closed == [True]
        window.gamepad = None
        window._on_key(key.Q, 0)  # without a pad, Q quits as before
        assert closed == [True, True]
    finally:
        window.close()


@pytest.mark.io
def test_a_click_captures_the_pointer_and_ctrl_alt_z_lets_it_go(xvfb: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a host that takes keys and the mouse: a click captures (and is not sent), then every key, button,
    motion and wheel goes to the game; the window's own keys need Ctrl+Alt; focus lost lets everything go."""
    monkeypatch.setenv("DISPLAY", xvfb)
    from pyglet.window import key, mouse

    from pyrofling.client.window import ViewerWindow

    class Link:
        available = True

        def __init__(self) -> None:
            self.calls: list[tuple[object, ...]] = []
            self.captured = False

        def capture(self, on: bool) -> None:
            self.captured = on
            self.calls.append(("capture", on))

        def key(self, name: str, down: bool) -> bool:
            self.calls.append(("key", name, down))
            return True

        def button(self, index: int, down: bool) -> None:
            self.calls.append(("button", index, down))

        def move(self, dx: int, dy: int) -> None:
            self.calls.append(("move", dx, dy))

        def scroll(self, v: int, h: int = 0) -> None:
            self.calls.append(("scroll", v, h))

        def point(self, x: float, y: float) -> None:
            self.calls.append(("point", round(x, 2), round(y, 2)))

        def release_all(self) -> None:
            self.calls.append(("release_all",))

    closed: list[bool] = []
    window = ViewerWindow(width=400, height=200)
    try:
        window.on_close_requested = lambda: closed.append(True)
        link = Link()
        window.keyboard_mouse = link
        window._on_mouse_motion(200, 100, 0, 0)  # no picture yet: nowhere to point
        assert link.calls == []
        window._on_mouse_press(10, 10, mouse.LEFT, 0)  # captures; the click itself is not the game's
        assert link.calls == [("capture", True)] and window.captured
        window._on_mouse_press(10, 10, mouse.RIGHT, 0)
        window._on_mouse_motion(0, 0, 5, 3)
        window._on_mouse_scroll(0, 0, 0, -1)
        window._on_key(key.V, 0)  # the game's now
        window._on_key(key.ESCAPE, 0)
        assert not window.hud_visible and not closed
        assert link.calls[1:] == [
            ("button", 1, True),
            ("move", 5, -3),  # y grows downward for the game
            ("scroll", -1, 0),
            ("key", "V", True),
            ("key", "ESCAPE", True),
        ]
        window._on_key(key.V, key.MOD_CTRL | key.MOD_ALT)  # the window's, with Ctrl+Alt
        assert window.hud_visible
        window._on_key(key.Z, key.MOD_CTRL | key.MOD_ALT)  # lets go
        assert not window.captured and link.calls[-1] == ("capture", False)
        window._on_mouse_press(10, 10, mouse.LEFT, 0)
        calls = len(link.calls)
        window._on_deactivate()  # focus lost: capture ends, nothing stays held
        assert link.calls[calls:] == [("capture", False), ("release_all",)]
        window._on_key(key.ESCAPE, 0)  # not captured: Esc is the window's again
        assert closed == [True]
    finally:
        window.close()


def test_the_overlay_says_how_pictures_are_timed() -> None:
    from pyrofling.client.hud import presentation_line

    assert presentation_line({"mode": "free"}).startswith("free-running")
    assert presentation_line({"mode": "fixed", "offset_ms": 0.0, "deadline_ms": 8.0}) == (
        "phase-locked, offset +0.0 ms, deadline 8.0 ms"
    )
    auto = {"margin_ms": 4.2, "learning": True, "p99_late_ms": 2.1}
    line = presentation_line({"mode": "auto", "offset_ms": 11.0, "deadline_ms": 15.2, "auto_offset": auto})
    assert line == "phase-locked, offset +11.0 ms, deadline 15.2 ms (auto: margin 4.2 ms for p99 lateness 2.1 ms)"
    assert presentation_line({"mode": "auto", "auto_offset": {"learning": False, "margin_ms": 6}}).endswith(
        "(auto: learning)"
    )


def _hdr10_quadrants(size: int) -> av.VideoFrame:
    """The stand-in layer's HDR10 quadrants (10-bit BT.2020 PQ) through x265 and back: a real HDR10 picture."""
    from pyrofling.capture.vulkan_standin import hdr10_quadrant_painter
    from pyrofling.client.codecs import VideoDecoder
    from pyrofling.server.encoder import EncoderConfig, VideoEncoder
    from pyrofling.wire import VideoCodec

    enc = VideoEncoder(EncoderConfig(encoder="libx265", width=size, height=size, fps=30, bitrate_kbits=2000, threads=1))
    pixels = np.zeros((size, size, 4), np.uint8)
    hdr10_quadrant_painter()(pixels, 0)
    packets = enc.encode_shared(pixels, 0, pixel_format="x2bgr10le", hdr10=True) + enc.flush()
    decoder = VideoDecoder(VideoCodec.H265, threads=1)
    [frame] = [f for p in packets for f in decoder.decode(p.data, p.pts_us)]
    return frame


def _shown(window: Any, frame: av.VideoFrame, shot: Path) -> np.ndarray:
    from pyrofling.client.presenter import Picture

    window.present(Picture(window.prepare(frame), 0, 0.0, None, None))
    window.save_screenshot(shot)
    with av.open(str(shot)) as container:
        return cast(np.ndarray, next(container.decode(video=0)).to_ndarray(format="rgb24"))


@pytest.mark.io
@pytest.mark.parametrize("gpu", [True, False], ids=["shader", "the GL cannot: CPU"])
def test_an_hdr10_picture_is_tone_mapped_for_the_sdr_window(
    xvfb: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gpu: bool
) -> None:
    """The window's shader shows what the CPU's tone mapping gives (their shared table), and the quadrants the
    colours the source's code values tone-map to; where the GL cannot compile it, the CPU does it instead."""
    monkeypatch.setenv("DISPLAY", xvfb)
    from pyglet.graphics.shader import ShaderException

    from pyrofling.capture.vulkan_standin import hdr10_quadrant_codes
    from pyrofling.client import window as window_module
    from pyrofling.client.pictures import ScreenPictures
    from pyrofling.client.tone_gl import ToneMappedTexture
    from pyrofling.core.color import ToneMapper

    if not gpu:

        def no_glsl_330(*_: object) -> None:
            raise ShaderException("GLSL 3.30 is not supported")

        monkeypatch.setattr(window_module, "ToneMappedTexture", no_glsl_330)
    size = 128
    frame = _hdr10_quadrants(size)
    window = window_module.ViewerWindow(width=size, height=size)
    try:
        shown = _shown(window, frame, tmp_path / "hdr10.png").astype(int)
        assert isinstance(window._tone_gl, ToneMappedTexture) == gpu and window._pictures.tone_mapped == 1
        if not gpu:
            assert isinstance(window.prepare(frame), tuple)  # from now on, on the decode thread
        sdr = av.VideoFrame.from_ndarray(np.full((size, size, 3), (200, 30, 90), np.uint8), format="rgb24")
        after = _shown(
            window, sdr.reformat(format="yuv420p", dst_colorspace=1, dst_color_range=2), tmp_path / "sdr.png"
        )
        assert np.abs(after.astype(int) - (200, 30, 90)).max() <= 4  # the stream back in SDR: shown as it is
    finally:
        window.close()
    assert shown.shape == (size, size, 3)
    cpu = np.frombuffer(ScreenPictures().rgb24(frame, size, size), np.uint8).reshape(size, size, 3).astype(int)
    assert np.abs(shown - cpu).max() <= 2
    codes16 = np.array([[[c << 6 | c >> 4 for c in rgb] for rgb in hdr10_quadrant_codes()]], np.uint16)
    expected = ToneMapper().to_srgb8(codes16)[0].astype(int)
    centres = [shown[y * size // 4, x * size // 4] for y, x in ((1, 1), (1, 3), (3, 3), (3, 1))]  # clockwise
    assert np.abs(np.array(centres) - expected).max() <= 6, (centres, expected)  # HEVC at 2 Mbit/s, two conversions
