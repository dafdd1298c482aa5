"""The viewer window (pyglet): a :class:`~pyrofling.client.presenter.Display` with a statistics overlay.

pyglet owns the main thread, and the presenter runs there: once per refresh it
calls :meth:`ViewerWindow.present`, which uploads the chosen picture (converted
to RGB at most at the window's size on the decode thread, in :meth:`prepare`),
draws it letterboxed and flips.  Where the flip blocks until the refresh (vsync
on a real display) that paces the loop; under Xvfb it does not, and the
presenter keeps a software refresh clock instead.

Keys: V statistics overlay with graphs (phase error, frame pace, latency, repeated
refreshes), F full screen, Esc quit (and Q, when the keyboard is not a pad).  With a
gamepad link, the keys of :data:`~pyrofling.core.input.pad.KEYBOARD_HELP` play.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import av
import pyglet
from pyglet import gl
from pyglet.graphics.shader import ShaderException
from pyglet.window import key

from pyrofling.client.display import flip_blocks
from pyrofling.client.hud import REFERENCE_FRAME_MS, HudGraphs, hud_lines, presentation_line
from pyrofling.client.pictures import ScreenPictures, is_hdr10_frame
from pyrofling.client.presenter import Picture
from pyrofling.client.tone_gl import ToneMappedTexture
from pyrofling.core.color import ToneMapper

if TYPE_CHECKING:
    from pyrofling.client.config import ViewerConfig
    from pyrofling.client.viewer import Viewer

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PqPicture:
    """An HDR10 picture prepared for the shader: 16-bit R'G'B' PQ code values at the size it is shown."""

    data: bytes
    width: int
    height: int


__all__ = ["ViewerWindow", "presentation_line", "watch_in_window"]


class ViewerWindow:
    """A pyglet window that shows what the presenter chooses."""

    def __init__(self, *, title: str = "pyrofling", width: int = 1280, height: int = 720) -> None:
        self.window = pyglet.window.Window(width, height, caption=title, resizable=True, vsync=True)
        self.refresh_hz = _screen_rate(self.window)
        self.vsync_blocks = flip_blocks(self.window)
        if not self.vsync_blocks:
            self.window.set_vsync(False)  # the presenter's software clock paces instead
        self.stats_source: Viewer | None = None  # for the overlay and the "connecting" line
        self.on_close_requested: Callable[[], None] | None = None
        self.gamepad: Any = None  # a GamepadLink: the keyboard is a pad too
        self.keyboard_mouse: Any = None  # an InputLink: keys and the mouse, for a host that takes them
        self.hud_visible = False
        self.frames_drawn = 0
        self.closed = False
        self._texture: Any = None
        self._fps_mark = (time.monotonic(), 0)
        self._audio_live: dict[str, Any] | None = None
        self._hud_due = 0.0
        self._hud = pyglet.text.Label(
            "",
            x=10,
            y=height - 10,
            anchor_y="top",
            multiline=True,
            width=560,
            font_size=12,
            color=(255, 255, 80, 255),
        )
        # Text on a dark panel stays readable over a bright picture.
        self._hud_panel = pyglet.shapes.Rectangle(4, 0, 572, 0, color=(0, 0, 0, 170))
        self._status = pyglet.text.Label(
            "", x=width // 2, y=height // 2, anchor_x="center", anchor_y="center", font_size=16
        )
        self._graphs = HudGraphs()
        self._pictures = ScreenPictures()  # SDR as it is, HDR10 tone-mapped
        #: HDR10 pictures are tone-mapped by a shader (made at the first one; None: not yet, False: the GL here
        #: cannot, so the decode thread tone-maps them on the CPU).
        self._tone_gl: ToneMappedTexture | bool | None = None
        self.window.push_handlers(
            on_key_press=self._on_key,
            on_key_release=self._on_key_release,
            on_deactivate=self._on_deactivate,
            on_close=self._on_close,
            on_mouse_press=self._on_mouse_press,
            on_mouse_release=self._on_mouse_release,
            on_mouse_motion=self._on_mouse_motion,
            on_mouse_drag=self._on_mouse_drag,
            on_mouse_scroll=self._on_mouse_scroll,
            on_resize=self._on_resize,
        )
        #: Told the window's size in pixels and the screen's rate when they change (a host sizes its desktop so).
        self.on_display: Callable[[int, int, float], None] | None = None

    def display_size(self) -> tuple[int, int, float]:
        """The picture one to one in this window: its size in pixels, and the screen's refresh rate (0: unknown)."""
        width, height = self.window.get_framebuffer_size()
        return width, height, self.refresh_hz or 0.0

    def _on_resize(self, _width: int, _height: int) -> None:
        if self.on_display is not None:
            self.on_display(*self.display_size())  # and pyglet's own handler sets the viewport

    # -- decode thread -------------------------------------------------------------------------

    def prepare(self, frame: av.VideoFrame) -> tuple[bytes, int, int] | PqPicture:
        w, h = self.window.get_size() if not self.closed else (frame.width, frame.height)
        scale = min(1.0, w / frame.width, h / frame.height)  # never convert more pixels than we can show
        out_w = max(2, int(frame.width * scale) // 2 * 2)
        out_h = max(2, int(frame.height * scale) // 2 * 2)
        if self._tone_gl is not False and is_hdr10_frame(frame):
            return PqPicture(self._pictures.pq48(frame, out_w, out_h), out_w, out_h)  # the shader tone-maps it
        return self._pictures.rgb24(frame, out_w, out_h), out_w, out_h

    # -- main thread (the presenter) -----------------------------------------------------------

    def present(self, picture: Picture | None) -> None:
        if self.closed:
            return
        if picture is not None and isinstance(picture.prepared, PqPicture):
            self._show_pq(picture.prepared)
        elif picture is not None and picture.prepared is not None:
            self._show_rgb(*picture.prepared)
        self.window.switch_to()
        self._draw()
        self.window.flip()

    def _show_pq(self, pq: PqPicture) -> None:
        """An HDR10 picture, tone-mapped by the shader (made at the first one), or on the CPU where it cannot be."""
        if self._tone_gl is None:
            try:
                self._tone_gl = ToneMappedTexture(self.window, ToneMapper())
                log.info("%s", self._tone_gl.description)
            except (gl.GLException, ShaderException, OSError) as exc:
                log.warning("HDR10 pictures are tone-mapped on the CPU (slower): this GL cannot (%s)", exc)
                self._tone_gl = False
        if isinstance(self._tone_gl, bool):  # the pictures prepared before the shader failed
            self._show_rgb(self._pictures.tone_map(pq.data, pq.width, pq.height), pq.width, pq.height)
            return
        self._tone_gl.update(pq.data, pq.width, pq.height)
        self._pictures.tone_mapped += 1
        self._texture = self._tone_gl
        self.frames_drawn += 1

    def _show_rgb(self, data: bytes, w: int, h: int) -> None:
        """Packed sRGB rows, top-down, into the window's texture (the one before reused at the same size)."""
        image = pyglet.image.ImageData(w, h, "RGB", data, pitch=-w * 3)  # rows top-down; GL is bottom-up
        tex = self._texture  # a shader's picture before (HDR10) is replaced by a texture of RGB
        if isinstance(tex, pyglet.image.Texture) and (tex.width, tex.height) == (w, h):
            tex.blit_into(image, 0, 0, 0)
        else:
            self._texture = image.get_texture()
        self.frames_drawn += 1

    def pump_events(self) -> bool:
        if not self.closed and self._texture is None:
            self.present(None)  # keep the "connecting" line current until a picture arrives
        if not self.closed:
            self.window.dispatch_events()
            if self.hud_visible and time.monotonic() >= self._hud_due:
                self._hud_due = time.monotonic() + 0.2
                self._update_hud()
        return not self.closed

    def close(self, *, screenshot: Path | None = None) -> None:
        if self.closed:
            return
        if screenshot is not None:
            self.save_screenshot(screenshot)
        self.closed = True
        self.window.close()

    def _draw(self) -> None:
        self.window.clear()
        tex = self._texture
        if tex is not None:
            win_w, win_h = self.window.get_framebuffer_size()
            scale = min(win_w / tex.width, win_h / tex.height)
            w, h = int(tex.width * scale), int(tex.height * scale)
            tex.blit((win_w - w) // 2, (win_h - h) // 2, 0, w, h)
        elif self.stats_source is not None:
            self._status.text = self.stats_source.state  # "connecting to …" until the first picture
            self._status.x, self._status.y = self.window.width // 2, self.window.height // 2
            self._status.draw()
        if self.hud_visible:
            self._hud.y = self.window.height - 10
            panel = self._hud_panel
            panel.height = self._hud.content_height + 12
            panel.y = self._hud.y - panel.height + 6
            panel.draw()
            self._hud.draw()
            self._graphs.batch.draw()

    def _update_hud(self) -> None:
        if self.stats_source is None:
            return
        s = self.stats_source.summary(live=True)  # the audio line uses the player's cheap live figures
        now, shown = time.monotonic(), int(s.get("presentation", {}).get("presented", 0))
        last_t, last_shown = self._fps_mark
        self._fps_mark = (now, shown)
        fps = (shown - last_shown) / (now - last_t) if now > last_t else 0.0
        audio = self.stats_source.audio
        self._audio_live = audio.live() if audio is not None else None
        self._hud.text = "\n".join(hud_lines(s, self.stats_source.codec_parameters, fps, self._audio_live))
        st = self.stats_source.presenter.stats
        with st.lock:
            series = [
                ("phase error", list(st.graph_phase_ms), -REFERENCE_FRAME_MS, REFERENCE_FRAME_MS),
                ("frame pace", list(st.graph_pace_ms), 0.0, 2 * REFERENCE_FRAME_MS),
                ("capture->on screen", list(st.graph_glass_ms), 0.0, 6 * REFERENCE_FRAME_MS),
                ("repeated refreshes", [1.0 if r else 0.0 for r in st.graph_repeat], 0.0, 1.0),
            ]
        live = self._audio_live
        if live is not None and live["recent_buffered_ms"]:
            series.append(("audio buffer", live["recent_buffered_ms"], 0.0, 2 * REFERENCE_FRAME_MS))
        self._graphs.update(series, self._hud.y - self._hud.content_height - 20)

    @property
    def captured(self) -> bool:
        """The pointer is captured: keys, buttons and relative motion go to the host's keyboard and mouse."""
        return self.keyboard_mouse is not None and self.keyboard_mouse.captured

    def _capture(self, on: bool) -> None:
        link = self.keyboard_mouse
        if link is None or (on and not link.available):
            return
        self.window.set_exclusive_mouse(on)
        link.capture(on)
        if self.gamepad is not None and on:
            self.gamepad.release_keys()  # the keys are the game's now, not the keyboard pad's

    def _on_key(self, symbol: int, modifiers: int) -> bool:
        name = key.symbol_string(symbol)
        ctrl_alt = modifiers & key.MOD_CTRL and modifiers & key.MOD_ALT
        if ctrl_alt and symbol == key.Z:  # lets the pointer go (or takes it, without a click)
            self._capture(not self.captured)
            return True
        if self.captured and not ctrl_alt:
            self.keyboard_mouse.key(name, True)  # everything is the game's; the window's keys need Ctrl+Alt
            return True
        if not self.captured and self.gamepad is not None and self.gamepad.key(name, True):
            return True
        if symbol == key.V:
            self.hud_visible = not self.hud_visible
            if self.hud_visible:
                self._update_hud()
        elif symbol == key.F:
            self.window.set_fullscreen(not self.window.fullscreen)
        elif symbol == key.ESCAPE or (symbol == key.Q and (self.gamepad is None or self.captured)):
            self._on_close()
        return True

    def _on_key_release(self, symbol: int, _modifiers: int) -> bool:
        name = key.symbol_string(symbol)
        if self.keyboard_mouse is not None:
            self.keyboard_mouse.key(name, False)  # a release never hurts: a key pressed before capture
        if self.gamepad is not None:
            self.gamepad.key(name, False)
        return True

    def _on_deactivate(self) -> bool:
        if self.gamepad is not None:
            self.gamepad.release_keys()  # a key let go in another window must not stay held here
        if self.keyboard_mouse is not None:
            if self.captured:
                self._capture(False)
            self.keyboard_mouse.release_all()
        return True

    def _on_mouse_press(self, x: int, y: int, button: int, _modifiers: int) -> bool:
        link = self.keyboard_mouse
        if link is None or not link.available:
            return True
        if not self.captured:
            self._capture(True)  # this click captures; it does not reach the game
            return True
        link.button(_MOUSE_BUTTONS.get(button, -1), True)
        return True

    def _on_mouse_release(self, x: int, y: int, button: int, _modifiers: int) -> bool:
        if self.keyboard_mouse is not None:
            self.keyboard_mouse.button(_MOUSE_BUTTONS.get(button, -1), False)
        return True

    def _on_mouse_motion(self, x: int, y: int, dx: int, dy: int) -> bool:
        link = self.keyboard_mouse
        if link is None or not link.available:
            return True
        if self.captured:
            link.move(dx, -dy)  # pyglet's y grows upward, the game's downward
        else:
            where = self._over_picture(x, y)
            if where is not None:
                link.point(*where)
        return True

    def _on_mouse_drag(self, x: int, y: int, dx: int, dy: int, _buttons: int, _modifiers: int) -> bool:
        return self._on_mouse_motion(x, y, dx, dy)

    def _on_mouse_scroll(self, x: int, y: int, scroll_x: float, scroll_y: float) -> bool:
        if self.captured:
            self.keyboard_mouse.scroll(round(scroll_y), round(scroll_x))
        return True

    def _over_picture(self, x: int, y: int) -> tuple[float, float] | None:
        """Where (x, y) of the window falls on the picture, 0..1 from its top left; None outside it."""
        tex = self._texture
        if tex is None:
            return None
        win_w, win_h = self.window.get_size()
        scale = min(win_w / tex.width, win_h / tex.height)
        w, h = tex.width * scale, tex.height * scale
        left, bottom = (win_w - w) / 2, (win_h - h) / 2
        u, v = (x - left) / w, 1 - (y - bottom) / h
        return (u, v) if 0 <= u <= 1 and 0 <= v <= 1 else None

    def _on_close(self) -> bool:
        if self.on_close_requested is not None:
            self.on_close_requested()
        return True

    def save_screenshot(self, path: Path) -> None:
        self.window.switch_to()
        self._draw()
        pyglet.image.get_buffer_manager().get_color_buffer().save(str(path))
        log.info("saved a screenshot to %s", path)


#: pyglet's mouse buttons → INPUT_STATE button bits (left, right, middle, side, extra).
_MOUSE_BUTTONS = {1: 0, 4: 1, 2: 2, 8: 3, 16: 4}


def _screen_rate(window: Any) -> float | None:
    """The screen's refresh rate, if the platform says (Xvfb says 0)."""
    try:
        rate = float(window.screen.get_mode().rate)
    except Exception:  # no XRandR / vidmode: not an error, just unknown
        return None
    return rate if rate > 1 else None


def watch_in_window(config: ViewerConfig, *, screenshot: Path | None = None, title: str = "pyrofling") -> Viewer:
    """Watch in a window: pyglet and the presenter own the main thread, the viewer's event loop a second one.

    Closing the window, Esc, Ctrl-C and SIGTERM all stop the viewer the same way (statistics written).
    """
    from pyrofling.client.viewer import Viewer

    window = ViewerWindow(title=title)
    if config.display is None:  # a host that makes its own desktop makes it the window's size
        config = replace(config, display=window.display_size())
    viewer = Viewer(config, display=window, run_presenter=False)
    window.on_display = viewer.display_changed
    window.stats_source = viewer
    window.gamepad = viewer.gamepad
    window.keyboard_mouse = viewer.keyboard_mouse
    stop = viewer.presenter_stop

    def network() -> None:
        try:
            asyncio.run(viewer.run())
        finally:
            stop.set()

    def close_requested(*_: object) -> None:
        viewer.stop()
        stop.set()

    thread = threading.Thread(target=network, name="pyrofling-network", daemon=True)
    thread.start()
    window.on_close_requested = close_requested
    previous = signal.signal(signal.SIGTERM, close_requested)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            viewer.presenter.run(stop)
    finally:
        signal.signal(signal.SIGTERM, previous)
        viewer.stop()
        window.close(screenshot=screenshot)
        thread.join(10)
    return viewer
