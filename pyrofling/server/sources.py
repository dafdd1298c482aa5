"""Video sources for the host: the test scene, or raw frames from a file or a pipe.

A source returns one frame per call as a ``(height * 3 // 2, width)`` yuv420p
array (the scene, raw yuv420p input) or an ``(height, width, 3)`` rgb24 array,
which the encoder converts (and times as "convert").
"""

from __future__ import annotations

import sys
from typing import BinaryIO, Protocol

import numpy as np
import numpy.typing as npt

from pyrofling.server.scene import TestScene

RAW_FORMATS = {"yuv420p": (3, 2), "rgb24": (3, 1)}  # bytes per pixel as a fraction (num, den)


class VideoSource(Protocol):
    #: "yuv420p" or "rgb24": the layout of what :meth:`read` returns.
    pixel_format: str

    def read(self, index: int, capture_us: int) -> npt.NDArray[np.uint8] | None:
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
            return None
        self.frames_read += 1
        return np.frombuffer(data, dtype=np.uint8).reshape(self.shape)

    def close(self) -> None:
        if self._stream is not sys.stdin.buffer:
            self._stream.close()


def open_source(spec: str, width: int, height: int, raw_format: str = "yuv420p") -> VideoSource:
    """``scene`` | ``file:PATH`` | ``rawvideo`` (stdin).  Raises ValueError with what to fix."""
    if spec == "scene":
        return SceneSource(width, height)
    if spec in ("rawvideo", "-", "file:-"):
        return RawSource(sys.stdin.buffer, width, height, raw_format, loop=False)
    if spec.startswith("file:"):
        path = spec[5:]
        try:
            stream = open(path, "rb")  # noqa: SIM115 - owned by the source, closed by close()
        except OSError as exc:
            raise ValueError(f"cannot open source file {path!r}: {exc.strerror}") from exc
        return RawSource(stream, width, height, raw_format, loop=True)
    raise ValueError(f"unknown source {spec!r}: use scene, file:PATH (raw frames) or rawvideo (raw frames on stdin)")
