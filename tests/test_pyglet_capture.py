"""PygletCapture reads a real (headless, Mesa) pyglet framebuffer into the capture swapchain: byte order, row
order and colour depth.  Each case runs in its own interpreter: pyglet's headless switch is process-wide."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest

#: Every test here streams, serves or plays through real sockets, threads or processes (not the quick tier).
pytestmark = pytest.mark.io

SCRIPT = r"""
import json, logging, sys
import pyglet
pyglet.options["headless"] = True
from pyglet import gl, shapes
from pyrofling.capture import CaptureClient
from pyrofling.capture.pyglet_helper import PygletCapture, framebuffer_config

depth, pixel_format, socket = sys.argv[1], sys.argv[2], sys.argv[3]
warnings = []
class Keep(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())
logging.getLogger("pyrofling.capture.pyglet_helper").addHandler(Keep())
configs = {"8-bit": framebuffer_config(), "8-bit-opaque": framebuffer_config(alpha=False)}
config = configs.get(depth)  # None: pyglet's default, RGB565 on headless Mesa
window = pyglet.window.Window(64, 48, visible=False, vsync=False, config=config)
client = None if pixel_format == "default" else CaptureClient(64, 48, pixel_format=pixel_format, path=socket)
capture = PygletCapture(window, client, path=socket) if client is None else PygletCapture(window, client)
gl.glClearColor(0.2, 0.4, 0.6, 1.0)
window.clear()
shapes.Rectangle(0, 0, 16, 8, color=(255, 0, 0)).draw()  # bottom left in GL's coordinates
seen = []
capture.present(lambda image: seen.append(image.copy()))
image = seen[0]
print(json.dumps({
    "format": capture.client.format.av_name,
    "red_bits": window.context.config.red_size,
    "alpha_bits": window.context.config.alpha_size,
    "top_left": image[0, 0].tolist(),
    "bottom_left": image[-1, 0].tolist(),
    "warnings": warnings,
}))
capture.close()
"""


def read_back(tmp_path: Path, depth: str, pixel_format: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, depth, pixel_format, str(tmp_path / "no-host.sock")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0 and "NoSuchConfig" in proc.stderr:
        pytest.skip(f"this Mesa offers no {depth} framebuffer: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("depth", ["8-bit", "8-bit-opaque"])
def test_the_default_swapchain_is_bgra_read_top_down_from_an_8_bit_framebuffer(tmp_path: Path, depth: str) -> None:
    got = read_back(tmp_path, depth, "default")
    assert got["format"] == "bgra" and got["warnings"] == []
    if depth == "8-bit":
        assert (got["red_bits"], got["alpha_bits"]) == (8, 8)  # exactly the swapchain's BGRA
    else:  # no alpha asked for (a visible window): whatever ≥ 8-bit config the platform has, read as opaque
        assert isinstance(got["red_bits"], int) and got["red_bits"] >= 8
    assert got["top_left"] == [153, 102, 51, 255]  # the clear colour (R 51, G 102, B 153) as B, G, R, A
    assert got["bottom_left"] == [0, 0, 255, 255]  # the red rectangle GL drew at its origin, now the last row


def test_a_client_asking_for_rgba_gets_rgba(tmp_path: Path) -> None:
    got = read_back(tmp_path, "8-bit", "rgba")
    assert got["format"] == "rgba"
    assert got["top_left"] == [51, 102, 153, 255] and got["bottom_left"] == [255, 0, 0, 255]


def test_pyglets_default_16_bit_headless_framebuffer_is_called_out(tmp_path: Path) -> None:
    got = read_back(tmp_path, "default", "default")
    if got["red_bits"] != 5:
        pytest.skip(f"pyglet's default framebuffer here has {got['red_bits']} bits of red, not RGB565")
    [warning] = cast(list[str], got["warnings"])
    assert "5/6/5 bits" in warning and "framebuffer_config()" in warning
