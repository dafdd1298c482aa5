"""The viewer window (pyglet): the newest decoded picture, scaled to fit, and a statistics overlay.

pyglet owns the main thread.  The decode thread calls :meth:`ViewerWindow.show`,
which converts the picture to RGB at most at the window's size and parks it in
a one-slot mailbox; the window uploads the newest picture on its next tick and
draws it letterboxed.  Keys: V statistics overlay, F full screen, Esc/Q quit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import av
import pyglet
from pyglet.window import key

from pyrofling.client.viewer import ShownFrame

log = logging.getLogger(__name__)

HUD_KEYS = (
    ("frames_shown", "frames shown"),
    ("packets_lost_video", "packets lost"),
    ("packets_recovered", "FEC recovered"),
    ("keyframe_requests", "key-frame requests"),
    ("reconnects", "reconnects"),
)


class ViewerWindow:
    """A :class:`~pyrofling.client.viewer.FrameSink` that shows frames in a pyglet window."""

    def __init__(self, *, title: str = "pyrofling", width: int = 1280, height: int = 720) -> None:
        self.window = pyglet.window.Window(width, height, caption=title, resizable=True, vsync=False)
        self.stats_source: Any = None  # a Viewer, for the overlay
        self.on_close_requested: Callable[[], None] | None = None
        self.hud_visible = False
        self.frames_drawn = 0
        self._mailbox: tuple[bytes, int, int, ShownFrame] | None = None
        self._lock = threading.Lock()
        self._texture: Any = None
        self._closing = threading.Event()
        self._screenshot: Path | None = None
        self._fps_mark = (time.monotonic(), 0)
        self._hud = pyglet.text.Label(
            "",
            x=10,
            y=height - 10,
            anchor_y="top",
            multiline=True,
            width=520,
            font_size=12,
            color=(255, 255, 80, 255),
        )
        self.window.push_handlers(on_draw=self._on_draw, on_key_press=self._on_key, on_close=self._on_close)

    # -- decode thread -------------------------------------------------------------------------

    def show(self, frame: av.VideoFrame, info: ShownFrame) -> None:
        w, h = self.window.get_size() if not self._closing.is_set() else (frame.width, frame.height)
        scale = min(1.0, w / frame.width, h / frame.height)  # never convert more pixels than we can show
        out_w = max(2, int(frame.width * scale) // 2 * 2)
        out_h = max(2, int(frame.height * scale) // 2 * 2)
        rgb = frame.reformat(width=out_w, height=out_h, format="rgb24")
        data = bytes(rgb.planes[0]) if rgb.planes[0].line_size == out_w * 3 else rgb.to_ndarray().tobytes()
        with self._lock:
            self._mailbox = (data, out_w, out_h, info)

    def close_soon(self) -> None:
        """From any thread: close the window at its next tick."""
        self._closing.set()

    # -- main thread ---------------------------------------------------------------------------

    def run(self, *, screenshot: Path | None = None) -> None:
        self._screenshot = screenshot
        pyglet.clock.schedule_interval(self._tick, 1 / 240)
        pyglet.clock.schedule_interval(self._update_hud, 0.5)
        pyglet.app.run(interval=None)

    def _tick(self, _dt: float) -> None:
        if self._closing.is_set():
            if self._screenshot is not None:
                self._save_screenshot(self._screenshot)
            self.window.close()
            pyglet.app.exit()
            return
        with self._lock:
            item, self._mailbox = self._mailbox, None
        if item is None:
            return
        data, w, h, _info = item
        image = pyglet.image.ImageData(w, h, "RGB", data, pitch=-w * 3)  # rows top-down; GL is bottom-up
        if self._texture is None or (self._texture.width, self._texture.height) != (w, h):
            self._texture = image.get_texture()
        else:
            self._texture.blit_into(image, 0, 0, 0)
        self.frames_drawn += 1
        self.window.dispatch_event("on_draw")
        self.window.flip()

    def _on_draw(self) -> None:
        self.window.clear()
        tex = self._texture
        if tex is not None:
            win_w, win_h = self.window.get_framebuffer_size()
            scale = min(win_w / tex.width, win_h / tex.height)
            w, h = int(tex.width * scale), int(tex.height * scale)
            tex.blit((win_w - w) // 2, (win_h - h) // 2, 0, w, h)
        if self.hud_visible:
            self._hud.y = self.window.height - 10
            self._hud.draw()

    def _update_hud(self, _dt: float) -> None:
        if not self.hud_visible or self.stats_source is None:
            return
        s = self.stats_source.summary()

        def ms(name: str) -> str:
            v = s.get(name)
            return "-" if v is None else f"{v:.1f} ms"

        params = self.stats_source.codec_parameters
        lines = []
        if params is not None:
            lines.append(f"{params.width}x{params.height} @ {params.frame_rate_num} fps")
        now, shown = time.monotonic(), int(s.get("frames_shown", 0))
        last_t, last_shown = self._fps_mark
        self._fps_mark = (now, shown)
        fps = (shown - last_shown) / (now - last_t) if now > last_t else 0.0
        lines.append(f"{fps:.1f} fps shown, bitrate {s.get('received_mbits', 0):.2f} Mbit/s")
        lines += [f"{label}: {s.get(k, 0)}" for k, label in HUD_KEYS]
        lines.append(f"decode {ms('decode_ms_median')}, capture->decoded {ms('latency_ms_median')}")
        lines.append(f"ping {ms('rtt_ms')}, longest freeze {s.get('max_freeze_ms', 0):.0f} ms")
        self._hud.text = "\n".join(lines)

    def _on_key(self, symbol: int, _modifiers: int) -> bool:
        if symbol == key.V:
            self.hud_visible = not self.hud_visible
            self._update_hud(0.0)
        elif symbol == key.F:
            self.window.set_fullscreen(not self.window.fullscreen)
        elif symbol in (key.ESCAPE, key.Q):
            self._on_close()
        return True

    def _on_close(self) -> bool:
        if self.on_close_requested is not None:
            self.on_close_requested()
        self._closing.set()
        return True

    def _save_screenshot(self, path: Path) -> None:
        self.window.switch_to()
        self._on_draw()
        pyglet.image.get_buffer_manager().get_color_buffer().save(str(path))
        log.info("saved a screenshot to %s", path)
