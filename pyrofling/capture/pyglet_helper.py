"""Stream a pyglet game: copy the window's framebuffer into the capture swapchain after each frame.

::

    window = pyglet.window.Window(1280, 720, config=framebuffer_config())
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

The swapchain is BGRA unless the client given says otherwise: an 8-bit
framebuffer lies in memory as B, G, R, A on Mesa and the desktop drivers, so
reading BGRA is a plain copy, while RGBA swaps every pixel's bytes (llvmpipe,
720p: 0.7 against 2.1 ms).  :func:`framebuffer_config` asks for 8 bits a
channel: without it pyglet's headless windows can get a 16-bit (RGB565)
framebuffer, which bands the picture and renders and reads back slower (the
example game's frame: 3.7 against 6.9 ms on llvmpipe).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from pyrofling.capture.client import CaptureClient
from pyrofling.wire.capture import PixelFormat

GL_PACK_INVERT_MESA = 0x8758

log = logging.getLogger(__name__)


def framebuffer_config(*, alpha: bool = True) -> Any:
    """A pyglet ``gl.Config`` with 8 bits a channel, double-buffered: what to create a captured window with
    (``pyglet.window.Window(..., config=framebuffer_config())``).

    ``alpha``: 8 bits of it too, which makes the framebuffer exactly the BGRA the swapchain holds, so Mesa's
    CPU driver reads it back as a copy (without alpha it fills one in: 2.0 against 0.9 ms at 720p).  Ask for
    none for a window shown on a compositing desktop, where a translucent alpha shows the desktop through."""
    from pyglet import gl

    # gl.Config is the platform's own class at run time (abstract only in the stubs).
    return gl.Config(  # type: ignore[abstract]
        red_size=8, green_size=8, blue_size=8, alpha_size=8 if alpha else 0, double_buffer=True
    )


class PygletCapture:
    """Presents a pyglet window's pictures through a :class:`CaptureClient` (made here unless given)."""

    def __init__(self, window: Any, client: CaptureClient | None = None, **client_options: Any) -> None:
        from pyglet import gl

        self.window = window
        self._gl = gl
        width, height = window.get_framebuffer_size()
        client_options.setdefault("pixel_format", "bgra")
        self.client = client or CaptureClient(width, height, **client_options)
        if (self.client.width, self.client.height) != (width, height):
            raise ValueError(
                f"the swapchain is {self.client.width}x{self.client.height}, the framebuffer {width}x{height}"
            )
        self._read_format = {
            PixelFormat.BGRA: gl.GL_BGRA,
            PixelFormat.RGBA: gl.GL_RGBA,
            PixelFormat.BGR: gl.GL_BGR,
            PixelFormat.RGB: gl.GL_RGB,
        }[self.client.format]
        config = window.context.config
        bits = (config.red_size, config.green_size, config.blue_size)
        if min(b or 0 for b in bits) < 8:
            log.warning(
                "the window's framebuffer has %s bits of red/green/blue: the stream shows its banding; create the "
                "window with config=pyrofling.capture.pyglet_helper.framebuffer_config()",
                "/".join(str(b) for b in bits),
            )
        window.switch_to()
        self.invert_in_gl = bool(gl.gl_info.have_extension("GL_MESA_pack_invert"))
        self._scratch: npt.NDArray[np.uint8] | None = None

    def present(self, stamp: Callable[[npt.NDArray[np.uint8]], None] | None = None) -> None:
        """Read the current back buffer into a shared image and present it.

        ``stamp``, if given, may write into the image (top-down, in the swapchain's pixel format) before it goes.
        """
        gl = self._gl
        frame = self.client.acquire()
        target = frame.array
        width, height = self.client.width, self.client.height
        self.window.switch_to()
        gl.glPixelStorei(gl.GL_PACK_ALIGNMENT, 4 if self.client.format.bytes_per_pixel == 4 else 1)
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
        gl.glReadPixels(0, 0, width, height, self._read_format, gl.GL_UNSIGNED_BYTE, pointer)

    def close(self) -> None:
        self.client.close()
