"""HDR10 pictures tone-mapped in the window's fragment shader: what :class:`~pyrofling.core.color.ToneMapper` does
on a CPU (30 ms of numpy a 720p picture on the 2-core machine), done by the GPU as the picture is drawn.

The decode thread gives 16-bit R'G'B' PQ code values at the window's size (swscale's rgb48, as for the CPU path);
:meth:`ToneMappedTexture.update` uploads them as an RGB16 texture on the main thread, and the shader looks each
channel up in the same 4,096-entry table (PQ code → tone-mapped linear light, a float texture), applies the same
BT.2020 → BT.709 matrix, clips, and encodes sRGB. Both paths share the table, so they show the same picture."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
from pyglet import gl
from pyglet.graphics.shader import Shader, ShaderProgram

from pyrofling.core.color import BT2020_TO_BT709, ToneMapper

_VERTEX = """#version 330 core
in vec2 position;
in vec2 tex_coords;
out vec2 uv;
void main() {
    gl_Position = vec4(position, 0.0, 1.0);
    uv = tex_coords;
}
"""

_FRAGMENT = """#version 330 core
in vec2 uv;
out vec4 colour;
uniform sampler2D picture;    // R'G'B': BT.2020 primaries in PQ code values
uniform sampler2D to_linear;  // TABLE x 1: PQ code -> tone-mapped linear light, 1.0 at the SDR white
uniform mat3 to_bt709;
const float TABLE = %d.0;

float light(float code) {
    return texelFetch(to_linear, ivec2(int(clamp(code * TABLE, 0.0, TABLE - 1.0)), 0), 0).r;
}

void main() {
    vec3 code = texture(picture, uv).rgb;
    vec3 rgb = clamp(to_bt709 * vec3(light(code.r), light(code.g), light(code.b)), 0.0, 1.0);
    vec3 srgb = mix(12.92 * rgb, 1.055 * pow(rgb, vec3(1.0 / 2.4)) - 0.055, step(0.0031308, rgb));
    colour = vec4(srgb, 1.0);
}
"""


class ToneMappedTexture:
    """A picture of 16-bit PQ code values drawn tone-mapped; ``width``/``height``/``blit`` as a pyglet texture's,
    so the window letterboxes it the same way. Made, fed and drawn on the main thread (the GL context's)."""

    def __init__(self, window: Any, mapper: ToneMapper) -> None:
        self._window = window
        table = np.ascontiguousarray(mapper.to_linear_table, np.float32)
        self._program = ShaderProgram(Shader(_VERTEX, "vertex"), Shader(_FRAGMENT % len(table), "fragment"))
        self._picture = _texture(gl.GL_LINEAR)
        self._table = _texture(gl.GL_NEAREST)
        gl.glTexImage2D(gl.GL_TEXTURE_2D, 0, gl.GL_R32F, len(table), 1, 0, gl.GL_RED, gl.GL_FLOAT, table.ctypes.data)
        # GLSL's matrices are column-major: the columns of BT2020_TO_BT709 are its transpose's rows.
        self._program.use()
        self._program["to_bt709"] = tuple(float(v) for v in BT2020_TO_BT709.T.ravel())
        self._program["picture"] = 0
        self._program["to_linear"] = 1
        self._program.stop()
        self._quad = self._program.vertex_list(
            4, gl.GL_TRIANGLE_STRIP, position=("f", (0.0,) * 8), tex_coords=("f", (0, 1, 1, 1, 0, 0, 1, 0))
        )
        self.width = self.height = 0
        self.description = mapper.mapping.describe() + " (on the GPU)"

    def update(self, rgb48: bytes, width: int, height: int) -> None:
        """The next picture: ``width * height`` pixels of three little-endian u16, rows top-down."""
        gl.glBindTexture(gl.GL_TEXTURE_2D, self._picture.value)
        gl.glPixelStorei(gl.GL_UNPACK_ALIGNMENT, 2)
        pixels = ctypes.c_char_p(rgb48)
        if (width, height) != (self.width, self.height):
            gl.glTexImage2D(gl.GL_TEXTURE_2D, 0, gl.GL_RGB16, width, height, 0, gl.GL_RGB, gl.GL_UNSIGNED_SHORT, pixels)
            self.width, self.height = width, height
        else:
            gl.glTexSubImage2D(gl.GL_TEXTURE_2D, 0, 0, 0, width, height, gl.GL_RGB, gl.GL_UNSIGNED_SHORT, pixels)
        gl.glPixelStorei(gl.GL_UNPACK_ALIGNMENT, 4)

    def blit(self, x: int, y: int, _z: int, width: int, height: int) -> None:
        """Draw at ``(x, y)`` (the framebuffer's pixels, from its lower left) at ``width x height``."""
        fb_w, fb_h = self._window.get_framebuffer_size()
        left, right = 2 * x / fb_w - 1, 2 * (x + width) / fb_w - 1
        bottom, top = 2 * y / fb_h - 1, 2 * (y + height) / fb_h - 1
        self._quad.position[:] = (left, bottom, right, bottom, left, top, right, top)  # type: ignore[attr-defined]
        self._program.use()
        gl.glActiveTexture(gl.GL_TEXTURE1)
        gl.glBindTexture(gl.GL_TEXTURE_2D, self._table.value)
        gl.glActiveTexture(gl.GL_TEXTURE0)
        gl.glBindTexture(gl.GL_TEXTURE_2D, self._picture.value)
        self._quad.draw(gl.GL_TRIANGLE_STRIP)
        self._program.stop()

    def delete(self) -> None:
        self._quad.delete()
        gl.glDeleteTextures(1, ctypes.byref(self._picture))
        gl.glDeleteTextures(1, ctypes.byref(self._table))


def _texture(filtering: int) -> gl.GLuint:
    """A new 2D texture, bound, clamped at its edges."""
    name = gl.GLuint()
    gl.glGenTextures(1, ctypes.byref(name))
    gl.glBindTexture(gl.GL_TEXTURE_2D, name.value)
    for param, value in (
        (gl.GL_TEXTURE_MIN_FILTER, filtering),
        (gl.GL_TEXTURE_MAG_FILTER, filtering),
        (gl.GL_TEXTURE_WRAP_S, gl.GL_CLAMP_TO_EDGE),
        (gl.GL_TEXTURE_WRAP_T, gl.GL_CLAMP_TO_EDGE),
    ):
        gl.glTexParameteri(gl.GL_TEXTURE_2D, param, value)
    return name
