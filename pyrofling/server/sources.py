"""Video sources for the host: the test scene, raw frames from a file or a pipe, an X11 screen.

A source returns one frame per call as a ``(height * 3 // 2, width)`` yuv420p
array (the scene, raw yuv420p input), an ``(height, width, 3)`` rgb24 array,
or a PyAV frame (the X11 grab), which the encoder converts (and times as
"convert").  Games presenting through the capture socket are not a source of
this kind: the host takes their images on its heartbeat (server/capture.py).
"""

from __future__ import annotations

import logging
import os
import stat
import sys
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

import av
import numpy as np
import numpy.typing as npt

from pyrofling.core.scene import TestScene

if TYPE_CHECKING:
    from pyrofling.core.host.display import FollowDisplay
    from pyrofling.server.audio import AudioConfig, AudioSource
    from pyrofling.server.config import HostConfig
    from pyrofling.server.encoder import VideoEncoder
    from pyrofling.server.input_devices import InputDevices
    from pyrofling.wire import CodecParameters

log = logging.getLogger(__name__)

RAW_FORMATS = {"yuv420p": (3, 2), "rgb24": (3, 1)}  # bytes per pixel as a fraction (num, den)


class VideoSource(Protocol):
    #: "yuv420p" or "rgb24": the layout of what :meth:`read` returns.
    pixel_format: str

    def read(self, index: int, capture_us: int) -> npt.NDArray[np.uint8] | av.VideoFrame | None:
        """The next frame, or None at the end of the input."""
        ...

    def close(self) -> None: ...


class SceneSource:
    pixel_format = "yuv420p"

    def __init__(self, width: int, height: int) -> None:
        self.scene = TestScene(width, height)

    def read(self, index: int, capture_us: int) -> npt.NDArray[np.uint8]:
        return self.scene.render(index, capture_us)

    def close(self) -> None:
        pass


class RawSource:
    """Raw frames of a fixed size read from a file (looped) or a pipe (ends with it)."""

    def __init__(self, stream: BinaryIO, width: int, height: int, pixel_format: str, *, loop: bool) -> None:
        if pixel_format not in RAW_FORMATS:
            raise ValueError(f"raw input format must be one of {', '.join(RAW_FORMATS)}, not {pixel_format!r}")
        num, den = RAW_FORMATS[pixel_format]
        self.pixel_format = pixel_format
        self.frame_bytes = width * height * num // den
        self.shape = (height * 3 // 2, width) if pixel_format == "yuv420p" else (height, width, 3)
        self._stream = stream
        self._loop = loop
        self.frames_read = 0

    def read(self, index: int, capture_us: int) -> npt.NDArray[np.uint8] | None:
        data = self._stream.read(self.frame_bytes)
        if len(data) < self.frame_bytes and self._loop and self.frames_read:
            self._stream.seek(0)
            data = self._stream.read(self.frame_bytes)
        if len(data) < self.frame_bytes:
            if data:
                log.warning(
                    "the input ended in the middle of a frame (%d of %d bytes): are --width, --height and "
                    "--raw-format those of the input?",
                    len(data),
                    self.frame_bytes,
                )
            elif not self.frames_read:
                log.warning("the input ended before its first frame")
            return None
        self.frames_read += 1
        return np.frombuffer(data, dtype=np.uint8).reshape(self.shape)

    def close(self) -> None:
        if self._stream is not sys.stdin.buffer:
            self._stream.close()


class X11GrabSource:
    """An X11 screen grabbed on demand with FFmpeg's x11grab (MIT-SHM), at the moment the heartbeat asks.

    x11grab paces reads to its frame rate; asking for a rate far above the
    stream's makes it grab at once, so the picture is as fresh as the tick.
    """

    pixel_format = "frame"

    def __init__(self, display: str, *, draw_mouse: bool = True, window: str | None = None) -> None:
        """``window``: grab only this window (a title, or part of one, or an id), not the whole screen."""
        options = {"framerate": "1000", "draw_mouse": "1" if draw_mouse else "0"}
        self.window = None
        if window is not None:
            from pyrofling.server.x11_windows import find_window

            self.window = find_window(display, window)
            options["window_id"] = str(self.window.id)
            log.info("x11: grabbing window %s", self.window.describe())
        try:
            self._container: Any = av.open(display, format="x11grab", options=options)
        except (av.FFmpegError, OSError) as exc:
            raise ValueError(f"cannot grab X11 display {display!r}: {exc} (is the display running and yours?)") from exc
        self._stream = self._container.streams.video[0]
        self.display = display
        self.width, self.height = self._stream.codec_context.width, self._stream.codec_context.height
        self._lock = threading.Lock()

    def read(self, index: int, capture_us: int) -> av.VideoFrame | None:
        with self._lock:
            try:
                for packet in self._container.demux(self._stream):
                    for frame in packet.decode():
                        return frame
            except (av.FFmpegError, OSError) as exc:  # a grabbed window that closed or shrank
                if self.window is None:
                    raise
                log.warning(
                    "x11: window %s cannot be grabbed any more (%s): the stream ends", self.window.describe(), exc
                )
                return None
        return None

    def close(self) -> None:
        with self._lock:
            self._container.close()


def check_source(spec: str) -> None:
    """ValueError (saying what to use) unless ``spec`` names a kind of source; opening it may still fail."""
    known = spec in ("scene", "capture", "rawvideo", "-", "x11", "headless", "wayland") or spec.startswith(
        ("file:", "x11:")
    )
    if not known:
        raise ValueError(
            f"unknown source {spec!r}: use scene, capture (games on the capture socket), x11[:DISPLAY], headless "
            "(a desktop of the host's own), wayland (the desktop you sit at), file:PATH (raw frames) or rawvideo "
            "(raw frames on stdin)"
        )


async def open_host_source(cfg: HostConfig) -> VideoSource | None:
    """The host's source (None for ``capture``: games present through the socket). ``headless`` starts a desktop
    of the host's own (its ``run_command`` in it) on the running event loop, ``wayland`` shares a monitor of the
    person's desktop through its portal; the rest is :func:`open_source`."""
    spec, enc = cfg.source, cfg.encoder
    if spec == "capture":
        return None
    if spec == "wayland":
        return await _open_wayland(cfg)
    if spec != "headless":
        if cfg.run_command is not None:
            raise ValueError("--run goes with --source headless (the program to start in the host's desktop)")
        return open_source(spec, enc.width, enc.height, cfg.raw_format, window=cfg.x11_window)
    try:
        from pyrofling.server.headless.desktop import DesktopError
        from pyrofling.server.headless.source import open_headless
    except ImportError as exc:
        raise ValueError(_needs_extra("headless", exc)) from None
    try:
        return await open_headless(enc.width, enc.height, enc.fps, cfg.run_command)
    except (DesktopError, RuntimeError) as exc:
        raise ValueError(f"--source headless: {exc}") from exc


def _needs_extra(source: str, exc: ImportError) -> str:
    return (
        f"--source {source} needs pyrofling's headless extra ({exc.name} is missing): "
        "pip install 'pyrofling[headless]' (scripts/setup does)"
    )


async def _open_wayland(cfg: HostConfig) -> VideoSource:
    try:
        from pyrofling.pairing import PairingStoreError, PortalToken
        from pyrofling.server.wayland import PortalError, open_wayland
    except ImportError as exc:
        raise ValueError(_needs_extra("wayland", exc)) from None
    try:
        remote = cfg.virtual_input == "portal"
        tokens = PortalToken(cfg.pairing_dir, "remote_desktop" if remote else "screen_cast")
        return await open_wayland(cfg.cursor, tokens, remote_input=remote)
    except (PortalError, PairingStoreError, RuntimeError) as exc:  # the kept token's file, too
        raise ValueError(f"--source wayland: {exc}") from exc


def desktop_input(source: VideoSource | None, virtual_input: str) -> InputDevices | None:
    """The keyboard and pointer of the desktop the source shows, where it has its own (the headless desktop's, or the
    RemoteDesktop portal's with ``--virtual-input portal``): viewers' keys go there rather than to uinput's devices
    (None: use those; ``none``: nobody's)."""
    devices: InputDevices | None = getattr(source, "input_devices", None)
    return devices if virtual_input != "none" else None


def desktop_sound(source: VideoSource | None, audio: AudioConfig) -> AudioSource | None:
    """The sound of the desktop the source shows (``--audio desktop``, the default with ``--source headless``);
    None for every other audio source."""
    if audio.source != "desktop":
        return None
    make = getattr(source, "sound", None)
    if make is None:
        raise ValueError("--audio desktop records the host's own desktop: it needs --source headless")
    sound: AudioSource = make(audio)
    return sound


def follow_display(source: VideoSource | None, out: FollowDisplay, fps: float) -> None:
    """A viewer's display (protocol.md §7.14), for a source that can take its size (the headless desktop): the
    encoder follows its pictures' new size (the heartbeat resizes it for a source ``sized_by_pictures``)."""
    follow = getattr(source, "follow", None)
    if follow is None:
        return
    mode = out.mode
    follow(mode.width, mode.height, mode.refresh_hz or fps)
    hz = f"@{mode.refresh_hz:g} Hz" if mode.refresh_hz else ""
    log.info("desktop: %dx%d%s, the display of viewer %d", mode.width, mode.height, hz, out.conn_id)


def resized(params: CodecParameters | None, encoder: VideoEncoder) -> CodecParameters | None:
    """The stream's parameters at the encoder's size and colour now (what a viewer that joins is told)."""
    config, color = encoder.config, int(encoder.color_profile)
    if params is None or (params.width, params.height, params.color_profile) == (config.width, config.height, color):
        return params
    if (params.width, params.height) != (config.width, config.height):
        log.info("streaming %dx%d", config.width, config.height)
    return replace(params, width=config.width, height=config.height, color_profile=color)


def open_source(
    spec: str, width: int, height: int, raw_format: str = "yuv420p", *, window: str | None = None
) -> VideoSource:
    """``scene`` | ``file:PATH`` | ``rawvideo`` (stdin) | ``x11[:DISPLAY]`` (``window``: one window of it).
    Raises ValueError with what to fix."""
    if spec == "scene":
        return SceneSource(width, height)
    if spec == "x11" or spec.startswith("x11:"):
        display = spec[4:] or os.environ.get("DISPLAY", "")
        if not display:
            raise ValueError("--source x11 needs a display: x11:DISPLAY (e.g. x11::0) or $DISPLAY set")
        if not display.startswith(":") and ":" not in display:
            display = f":{display}"
        return X11GrabSource(display, window=window)
    if spec in ("rawvideo", "-", "file:-"):
        return RawSource(sys.stdin.buffer, width, height, raw_format, loop=False)
    if spec.startswith("file:"):
        path = spec[5:]
        try:
            stream = open(path, "rb")  # noqa: SIM115 - owned by the source, closed by close()
        except OSError as exc:
            raise ValueError(f"cannot open source file {path!r}: {exc.strerror}") from exc
        source = RawSource(stream, width, height, raw_format, loop=True)
        size = os.fstat(stream.fileno()).st_size
        if stat.S_ISREG(os.fstat(stream.fileno()).st_mode) and (size < source.frame_bytes or size % source.frame_bytes):
            stream.close()
            frames = f"{width}x{height} {raw_format} frames of {source.frame_bytes} bytes"
            raise ValueError(
                f"{path} holds {size} bytes, not a whole number of {frames}: "
                "are --width, --height and --raw-format those of the file?"
            )
        return source
    check_source(spec)
    raise ValueError(f"source {spec!r} is not opened here: games connect to the host's capture socket")


_PLACEHOLDERS: dict[str, av.VideoFrame] = {}


def placeholder_frame(pix_fmt: str) -> av.VideoFrame:
    """What the host streams while no game presents: 16×16 of PyroFling's dark blue (0.1, 0.2, 0.3).

    Tiny, so it costs nothing to scale and encode; the encoder scales it to the stream size.
    """
    frame = _PLACEHOLDERS.get(pix_fmt)
    if frame is None:
        rgb = np.empty((16, 16, 3), np.uint8)
        rgb[:] = (26, 51, 77)
        frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(
            format=pix_fmt, dst_colorspace=1, dst_color_range=2
        )
        _PLACEHOLDERS[pix_fmt] = frame
    return frame
