"""The web port's listening socket: each connection admitted or closed at the accept, before TLS and before a read.

asyncio (and websockets on it) accepts with the listening socket's ``accept()``;
this socket's asks :class:`~pyrofling.core.host.web_door.WebDoor` first and closes
what it refuses there, so a flood of connections costs the host an accept and a
close each, not a transport, a TLS handshake and a task. An admitted connection's
socket tells the door when it closes, so the door knows what is open.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
from collections.abc import Callable
from typing import Any

from pyrofling.clocks import SYSTEM_CLOCK, Clock
from pyrofling.core.host.web_door import WebDoor, max_open_for

#: Connections refused in one ``accept()`` at most before the event loop gets its turn back.
REFUSALS_PER_ACCEPT = 64


class _CountedSocket(socket.socket):
    """An accepted connection that says once when it is closed."""

    __slots__ = ("_on_close",)
    _on_close: Callable[[], None] | None

    def close(self) -> None:
        super().close()
        on_close, self._on_close = getattr(self, "_on_close", None), None
        if on_close is not None:
            on_close()


class AdmittingListener(socket.socket):
    """A listening TCP socket whose ``accept()`` returns only connections the door admits."""

    __slots__ = ("clock", "door")

    door: WebDoor
    clock: Clock

    def accept(self) -> tuple[socket.socket, Any]:
        for _ in range(REFUSALS_PER_ACCEPT):
            fd, addr = self._accept()  # type: ignore[attr-defined]  # raises BlockingIOError when none waits
            address = str(addr[0])
            if self.door.admit(address, self.clock.now()) is not None:
                os.close(fd)  # unread: no TLS, no transport
                continue
            conn = _CountedSocket(self.family, self.type, self.proto, fileno=fd)
            conn._on_close = lambda address=address: self.door.closed(address)
            if socket.getdefaulttimeout() is None and self.gettimeout():
                conn.setblocking(True)  # as socket.accept() does
            return conn, addr
        raise BlockingIOError("the rest waits for the next turn of the loop")


def listen(bind: str, port: int, door: WebDoor, clock: Clock = SYSTEM_CLOCK, backlog: int = 128) -> socket.socket:
    """A listening socket on ``bind``:``port`` (``::`` takes IPv4 too) whose accepts ``door`` admits."""
    family, kind, proto, _, address = socket.getaddrinfo(
        bind or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = AdmittingListener(family, kind, proto)
    sock.door, sock.clock = door, clock
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and bind in ("::", ""):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def descriptor_room() -> int:
    """Connections the web port may hold open within this process's descriptor limit (see ``max_open_for``)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:
        in_use = 64
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max_open_for(soft, in_use)
