"""Stream a Python game with pyrofling: present numpy frames into the host's capture socket.

See :class:`~pyrofling.capture.client.CaptureClient`, and
:mod:`pyrofling.capture.pyglet_helper` for pyglet games.  The protocol is
protocol.md §8 (its messages: :mod:`pyrofling.wire.capture`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyrofling.capture.client import CaptureClient, CaptureRequestError, Frame
    from pyrofling.capture.paths import default_socket_path
    from pyrofling.wire.capture import PixelFormat

__all__ = ["CaptureClient", "CaptureRequestError", "Frame", "PixelFormat", "default_socket_path"]

#: Where each name lives: loaded on first use, so that the host, which needs only the socket's path, does not
#: load the game's client with it.
_HOMES = {
    "CaptureClient": "pyrofling.capture.client",
    "CaptureRequestError": "pyrofling.capture.client",
    "Frame": "pyrofling.capture.client",
    "default_socket_path": "pyrofling.capture.paths",
    "PixelFormat": "pyrofling.wire.capture",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'pyrofling.capture' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
