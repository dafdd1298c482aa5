"""mutter's virtual monitor, recorded into PipeWire, over the desktop's bus (``org.gnome.Mutter.ScreenCast``).

The order mutter 43 wants: a RemoteDesktop session (its input: :mod:`.remote_input`), a ScreenCast
session linked to it, ``RecordVirtual`` (a monitor that exists while it is
recorded, at the size the recording's caps ask), then RemoteDesktop's ``Start``,
which starts both; the stream's PipeWire node comes in its ``PipeWireStreamAdded``
signal. The sessions belong to this bus connection: when it closes, mutter ends
them and the monitor goes.
"""

from __future__ import annotations

import asyncio

from dbus_fast import Variant
from dbus_fast.aio import MessageBus, ProxyInterface

REMOTE_DESKTOP = "org.gnome.Mutter.RemoteDesktop"
SCREEN_CAST = "org.gnome.Mutter.ScreenCast"
#: The pointer drawn into the frames (0: hidden, 1: drawn in, 2: as metadata).
CURSOR_EMBEDDED = 1


async def _interface(bus: MessageBus, name: str, path: str, interface: str) -> ProxyInterface:
    introspection = await bus.introspect(name, path)
    return bus.get_proxy_object(name, path, introspection).get_interface(interface)


class VirtualMonitor:
    """``node = await VirtualMonitor(bus).start()``: the PipeWire node to record, until the bus connection closes
    (the desktop's :meth:`~pyrofling.server.headless.desktop.HeadlessDesktop.close`)."""

    def __init__(self, bus: MessageBus, *, cursor_mode: int = CURSOR_EMBEDDED) -> None:
        self.bus = bus
        self.cursor_mode = cursor_mode
        self.node_id: int | None = None
        #: The RemoteDesktop session's and the recorded stream's object paths (the input goes to them).
        self.session_path = ""
        self.stream_path = ""

    async def start(self, timeout_s: float = 10.0) -> int:
        bus = self.bus
        async with asyncio.timeout(timeout_s):
            remote = await _interface(bus, REMOTE_DESKTOP, "/org/gnome/Mutter/RemoteDesktop", REMOTE_DESKTOP)
            self.session_path = await remote.call_create_session()  # type: ignore[attr-defined]
            session_proxy = await _interface(bus, REMOTE_DESKTOP, self.session_path, f"{REMOTE_DESKTOP}.Session")
            session_id = await session_proxy.get_session_id()  # type: ignore[attr-defined]
            cast = await _interface(bus, SCREEN_CAST, "/org/gnome/Mutter/ScreenCast", SCREEN_CAST)
            cast_path = await cast.call_create_session(  # type: ignore[attr-defined]
                {"remote-desktop-session-id": Variant("s", session_id)}
            )
            session = await _interface(bus, SCREEN_CAST, cast_path, f"{SCREEN_CAST}.Session")
            self.stream_path = await session.call_record_virtual(  # type: ignore[attr-defined]
                {"cursor-mode": Variant("u", self.cursor_mode), "is-platform": Variant("b", True)}
            )
            stream = await _interface(bus, SCREEN_CAST, self.stream_path, f"{SCREEN_CAST}.Stream")
            added: asyncio.Future[int] = asyncio.get_running_loop().create_future()

            def stream_added(node: int) -> None:
                if not added.done():
                    added.set_result(int(node))

            stream.on_pipe_wire_stream_added(stream_added)  # type: ignore[attr-defined]
            await session_proxy.call_start()  # type: ignore[attr-defined]
            self.node_id = await added
        return self.node_id
