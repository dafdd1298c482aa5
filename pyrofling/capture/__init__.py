"""Stream a Python game with pyrofling: present numpy frames into the host's capture socket.

See :class:`~pyrofling.capture.client.CaptureClient`, and
:mod:`pyrofling.capture.pyglet_helper` for pyglet games.  The protocol is
protocol.md §8 (its messages: :mod:`pyrofling.wire.capture`).
"""

from pyrofling.capture.client import CaptureClient, CaptureRequestError, Frame
from pyrofling.capture.paths import default_socket_path
from pyrofling.wire.capture import PixelFormat

__all__ = ["CaptureClient", "CaptureRequestError", "Frame", "PixelFormat", "default_socket_path"]
