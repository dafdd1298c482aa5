"""``pyrofling example-game``: a small pyglet game that presents through the capture socket.

A ball you steer with the viewer's pad (left stick, d-pad; on a keyboard in the
viewer window: WASD or the arrows), A (Z or Space) makes it jump in size, a
second ball bounces on its own, a grid scrolls: enough motion to see how smooth
the stream is.  Without a display it renders headless (EGL, software GL); on a
machine without OpenGL at all (a server with no Mesa) it draws the same game with
numpy (``--renderer numpy``, chosen by ``auto`` there).

``--stamp`` writes a frame marker into the top rows of every frame: the newest
pad sequence number the game had when it drew the frame, and the time it
presented it.  The viewer reads it after decoding, which is how
``pyrofling bench input`` times a pad change to the picture that shows it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from pyrofling.capture.client import CaptureClient
from pyrofling.core import frame_marker
from pyrofling.core.input.pad import STICK_MAX, PadState
from pyrofling.wire import GamepadButton

log = logging.getLogger(__name__)

NO_PAD_YET = 0xFFFFFFFF  # marker frame id before the first pad state
SPEED_PX_S = 700.0


@dataclass(frozen=True, slots=True)
class GameConfig:
    width: int = 1280
    height: int = 720
    socket: str | None = None
    sync: str = "fifo"
    images: int = 3
    frames_in_flight: int = 1
    #: Start each frame just in time for the heartbeat (the client falls back to at once for a long frame).
    just_in_time: bool = True
    headless: bool = False
    duration_s: float | None = None
    stamp: bool = False
    stats_json: Path | None = None
    #: gl (pyglet), numpy (no OpenGL needed), or auto: gl where OpenGL loads, else numpy.
    renderer: str = "auto"


class World:
    """The game's state; pure, advanced by ``step(pad, dt)``."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.x, self.y = width / 2, height / 2
        self.size = 1.0
        self.bx, self.by = width * 0.25, height * 0.7
        self.vx, self.vy = 310.0, 230.0
        self.scroll = 0.0
        self._was_pressed = False

    def step(self, pad: PadState, dt: float) -> None:
        dx = pad.lx / STICK_MAX + pad.hat_x
        dy = pad.ly / STICK_MAX + pad.hat_y  # +y is down on a pad, up on screen
        self.x = min(max(self.x + dx * SPEED_PX_S * dt, 0.0), self.width)
        self.y = min(max(self.y - dy * SPEED_PX_S * dt, 0.0), self.height)
        pressed = pad.pressed(GamepadButton.SOUTH)  # A
        if pressed and not self._was_pressed:
            self.size = 1.8
        self._was_pressed = pressed
        self.size = 1.0 + (self.size - 1.0) * math.exp(-4.0 * dt)
        self.bx += self.vx * dt
        self.by += self.vy * dt
        if not 0 <= self.bx <= self.width:
            self.vx = -self.vx
            self.bx = min(max(self.bx, 0.0), self.width)
        if not 0 <= self.by <= self.height:
            self.vy = -self.vy
            self.by = min(max(self.by, 0.0), self.height)
        self.scroll = (self.scroll + 60.0 * dt) % 80.0


def stamp_marker(image: npt.NDArray[np.uint8], frame_id: int, when_s: float) -> None:
    """Paint the frame marker (white/black blocks, all colour channels) into the top of an RGB(A) image."""
    layout = frame_marker.layout_for(image.shape[1])
    if layout is None:
        return
    band = np.zeros((layout.height, image.shape[1]), np.uint8)
    frame_marker.paint(band, frame_marker.FrameStamp(frame_id & 0xFFFFFFFF, int(when_s * 1_000_000)), layout)
    image[: layout.height, :, :3] = band[:, :, None]


def run_game(cfg: GameConfig) -> dict[str, Any]:
    """Run until the duration, Ctrl-C/SIGTERM, or the window closing; return the statistics."""
    if cfg.renderer == "numpy":
        return run_numpy_game(cfg)
    import pyglet

    if cfg.headless:
        pyglet.options["headless"] = True  # before pyglet.gl is imported: it picks EGL then
    try:
        import pyglet.gl  # loads libGL: an ImportError where there is none
    except ImportError as exc:
        if cfg.renderer == "gl" or "GL" not in str(exc):
            raise
        log.info("no OpenGL here (%s): drawing the game with numpy", exc)
        return run_numpy_game(cfg)
    return _run_gl_game(cfg)


def _run_gl_game(cfg: GameConfig) -> dict[str, Any]:
    import pyglet
    from pyglet import shapes, text

    from pyrofling.capture.pyglet_helper import PygletCapture, framebuffer_config

    def make_window(config: Any) -> Any:
        return pyglet.window.Window(
            cfg.width,
            cfg.height,
            caption="pyrofling example game",
            visible=not cfg.headless,
            vsync=False,
            config=config,
        )

    try:
        window = make_window(framebuffer_config(alpha=cfg.headless))  # a visible window stays opaque
    except pyglet.window.NoSuchConfigException:  # PygletCapture says what the stream loses
        window = make_window(None)
    capture = PygletCapture(window, **_client_options(cfg))
    world = World(cfg.width, cfg.height)
    batch = pyglet.graphics.Batch()
    background = pyglet.graphics.Group(order=0)
    foreground = pyglet.graphics.Group(order=1)
    grid = [
        shapes.Line(0, 0, 0, 0, thickness=2, color=(40, 60, 90), batch=batch, group=background)
        for _ in range(cfg.width // 80 + cfg.height // 80 + 4)
    ]
    bouncer = shapes.Circle(0, 0, 28, color=(240, 170, 40), batch=batch, group=foreground)
    player = shapes.Circle(0, 0, 40, color=(80, 200, 255), batch=batch, group=foreground)
    labels = [
        text.Label(
            "pyrofling example game - steer with the pad (WASD/arrows in the viewer), A (Z) to pulse",
            x=16,
            y=16,
            font_size=14,
            color=(220, 220, 220, 255),
            batch=batch,
            group=foreground,
        ),
        text.Label("", x=16, y=40, font_size=12, color=(160, 200, 160, 255), batch=batch, group=foreground),
    ]

    clock = _GameClock(cfg.duration_s)
    client = capture.client
    frames = 0
    try:
        for dt in clock.frames():
            window.dispatch_events()
            if window.has_exit:
                break
            pad_seq = client.gamepad_seq
            world.step(client.gamepad, dt)
            n_vertical = cfg.width // 80 + 2
            for i, line in enumerate(grid):
                if i < n_vertical:
                    x = i * 80 - world.scroll
                    line.x, line.y, line.x2, line.y2 = x, 0, x, cfg.height
                else:
                    y = (i - n_vertical) * 80 - world.scroll
                    line.x, line.y, line.x2, line.y2 = 0, y, cfg.width, y
            player.x, player.y, player.radius = world.x, world.y, 40 * world.size
            bouncer.x, bouncer.y = world.bx, world.by
            if frames % 30 == 0:
                state = "streaming" if client.connected else f"waiting for a host on {client.path}"
                labels[1].text = f"{state} - pad states received: {client.stats.gamepad_states}"
            window.switch_to()
            window.clear()
            batch.draw()
            if cfg.stamp:
                seq = NO_PAD_YET if pad_seq is None else pad_seq

                def stamp(image: npt.NDArray[np.uint8], seq: int = seq) -> None:
                    stamp_marker(image, seq, time.monotonic())

                capture.present(stamp)
            else:
                capture.present()
            if not cfg.headless:
                window.flip()
            frames += 1
    finally:
        result = _result(client, cfg, frames, clock.started)
        result.update(renderer="gl", readback_inverted_in_gl=capture.invert_in_gl)
        capture.close()
        window.close()
        if cfg.stats_json is not None:
            cfg.stats_json.write_text(json.dumps(result))
    return result


def _client_options(cfg: GameConfig) -> dict[str, Any]:
    return {
        "name": "pyrofling example game",
        "path": cfg.socket,
        "sync": cfg.sync,
        "images": cfg.images,
        "frames_in_flight": cfg.frames_in_flight,
        "just_in_time": cfg.just_in_time,
    }


class _GameClock:
    """The game loop's frames: each one's time step (at most 0.1 s), until the duration or Ctrl-C/SIGTERM."""

    def __init__(self, duration_s: float | None) -> None:
        self.duration_s = duration_s
        self.started = time.monotonic()
        self._stop = False
        signal.signal(signal.SIGINT, self._set)
        signal.signal(signal.SIGTERM, self._set)

    def frames(self) -> Iterator[float]:
        last = self.started
        while not self._stop:
            now = time.monotonic()
            if self.duration_s is not None and now - self.started >= self.duration_s:
                return
            yield min(now - last, 0.1)
            last = now

    def _set(self, _signum: int, _frame: object) -> None:
        self._stop = True


def _result(client: CaptureClient, cfg: GameConfig, frames: int, started: float) -> dict[str, Any]:
    stats = client.stats
    return {
        "frames": frames,
        "elapsed_s": time.monotonic() - started,
        "presents": stats.presents,
        "presents_local": stats.presents_local,
        "connects": stats.connects,
        "disconnects": stats.disconnects,
        "frame_completes": stats.frame_completes,
        "just_in_time": client.pacing is not None,
        "frames_delayed": stats.frames_delayed,
        "late_presents": stats.late_presents,
        "lead_ms": client.pacing.lead_s * 1000 if client.pacing is not None and client.pacing.lead_s else None,
        "gamepad_states": stats.gamepad_states,
        "period_ns": client.period_ns,
        "sync": cfg.sync,
        "present_times": list(stats.present_times),
    }


class NumpyCanvas:
    """The game drawn with numpy into an RGBA image (top row first): the grid, the bouncing ball and the
    player's ball, as the GL renderer draws them (text left out)."""

    BACKGROUND = (0, 0, 0, 255)
    GRID = (40, 60, 90, 255)
    BOUNCER = (240, 170, 40, 255)
    PLAYER = (80, 200, 255, 255)

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self._background, self._grid, self._bouncer, self._player = (
            _pixel(c) for c in (self.BACKGROUND, self.GRID, self.BOUNCER, self.PLAYER)
        )

    def draw(self, image: npt.NDArray[np.uint8], world: World) -> None:
        # Whole pixels at a time (one 32-bit store each, not four bytes): the draw's time is input latency.
        pixels = image.view(np.uint32).reshape(self.height, self.width)
        pixels.fill(self._background)
        offset = int(world.scroll)
        columns = np.arange(-offset % 80, self.width, 80)  # lines two pixels wide: x − 1 and x
        pixels[:, np.concatenate((columns, columns[columns > 0] - 1))] = self._grid
        rows = self.height - 1 - np.arange(-offset % 80, self.height, 80)  # world y runs up, rows run down
        pixels[np.concatenate((rows, rows[rows > 0] - 1))] = self._grid
        self._disc(pixels, world.bx, world.by, 28.0, self._bouncer)
        self._disc(pixels, world.x, world.y, 40.0 * world.size, self._player)

    def _disc(self, pixels: npt.NDArray[np.uint32], x: float, y: float, r: float, color: int) -> None:
        cy = self.height - 1 - y
        x0, x1 = max(0, int(x - r)), min(self.width, int(x + r) + 1)
        y0, y1 = max(0, int(cy - r)), min(self.height, int(cy + r) + 1)
        if x0 >= x1 or y0 >= y1:
            return
        xs = np.arange(x0, x1) - x
        ys = np.arange(y0, y1)[:, None] - cy
        pixels[y0:y1, x0:x1][xs * xs + ys * ys <= r * r] = color


def _pixel(rgba: tuple[int, ...]) -> int:
    """An RGBA colour as the 32-bit word that stores it (bytes in memory order)."""
    return int(np.frombuffer(bytes(rgba), np.uint32)[0])


def run_numpy_game(cfg: GameConfig) -> dict[str, Any]:
    """The game without OpenGL: drawn with numpy straight into the shared images."""
    client = CaptureClient(cfg.width, cfg.height, **_client_options(cfg))
    world, canvas = World(cfg.width, cfg.height), NumpyCanvas(cfg.width, cfg.height)
    clock = _GameClock(cfg.duration_s)
    frames = 0
    try:
        for dt in clock.frames():
            pad_seq = client.gamepad_seq
            world.step(client.gamepad, dt)
            frame = client.acquire()
            canvas.draw(frame.array, world)
            if cfg.stamp:
                stamp_marker(frame.array, NO_PAD_YET if pad_seq is None else pad_seq, time.monotonic())
            client.present(frame)
            frames += 1
    finally:
        result = _result(client, cfg, frames, clock.started)
        result["renderer"] = "numpy"
        client.close()
        if cfg.stats_json is not None:
            cfg.stats_json.write_text(json.dumps(result))
    return result


def default_headless() -> bool:
    return not os.environ.get("DISPLAY")
