"""Stream a pyglet game: copy the window's framebuffer into the capture swapchain after each frame.

::

    window = pyglet.window.Window(1280, 720)
    capture = PygletCapture(window, name="my game")
    while running:
        window.dispatch_events()
        window.clear()
        batch.draw()
        capture.present()      # read back into shared memory, present, wait for the host's heartbeat
        window.flip()          # optional: also show it locally

``glReadPixels`` writes straight into the shared image (one copy, GPU to the
host's memory; there is no other).  OpenGL's rows run bottom-up; Mesa's
``GL_MESA_pack_invert`` turns them top-down during that copy, elsewhere numpy
flips them (a second copy).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from pyrofling.capture.client import CaptureClient

GL_PACK_INVERT_MESA = 0x8758


class PygletCapture:
    """Presents a pyglet window's pictures through a :class:`CaptureClient` (made here unless given)."""

    def __init__(self, window: Any, client: CaptureClient | None = None, **client_options: Any) -> None:
        from pyglet import gl

        self.window = window
        self._gl = gl
        width, height = window.get_framebuffer_size()
        self.client = client or CaptureClient(width, height, pixel_format="rgba", **client_options)
        if (self.client.width, self.client.height) != (width, height):
            raise ValueError(
                f"the swapchain is {self.client.width}x{self.client.height}, the framebuffer {width}x{height}"
            )
        window.switch_to()
        self.invert_in_gl = bool(gl.gl_info.have_extension("GL_MESA_pack_invert"))
        self._scratch: npt.NDArray[np.uint8] | None = None

    def present(self, stamp: Callable[[npt.NDArray[np.uint8]], None] | None = None) -> None:
        """Read the current back buffer into a shared image and present it.

        ``stamp``, if given, may write into the image (top-down RGBA) before it goes.
        """
        gl = self._gl
        frame = self.client.acquire()
        target = frame.array
        width, height = self.client.width, self.client.height
        self.window.switch_to()
        gl.glPixelStorei(gl.GL_PACK_ALIGNMENT, 4)
        if self.invert_in_gl:
            gl.glPixelStorei(GL_PACK_INVERT_MESA, 1)
            self._read(target, width, height)
            gl.glPixelStorei(GL_PACK_INVERT_MESA, 0)
        else:
            if self._scratch is None:
                self._scratch = np.empty_like(target)
            self._read(self._scratch, width, height)
            np.copyto(target, self._scratch[::-1])
        if stamp is not None:
            stamp(target)
        self.client.present(frame)

    def _read(self, out: npt.NDArray[np.uint8], width: int, height: int) -> None:
        gl = self._gl
        pointer = out.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte))
        gl.glReadPixels(0, 0, width, height, gl.GL_RGBA, gl.GL_UNSIGNED_BYTE, pointer)

    def close(self) -> None:
        self.client.close()
