"""The viewers' keys, mouse and pointer into the headless desktop, through mutter's RemoteDesktop session.

An :class:`~pyrofling.server.input_devices.InputDevices` like the uinput one: the
host's router decides what reaches the desktop, and writes evdev reports;
:class:`~pyrofling.core.host.headless.RemoteInput` turns them into
``org.gnome.Mutter.RemoteDesktop.Session`` calls, which go out on the desktop's bus
in order without waiting for replies (a call takes about 0.3 ms there and back,
and a report must not wait on one). No ``/dev/uinput`` is needed, and nothing
reaches the machine's other desktops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from dbus_fast import Message, MessageFlag
from dbus_fast.aio import MessageBus

from pyrofling.core.host.headless import RemoteCall, RemoteInput, first_key_fix
from pyrofling.core.input.pad.state import Event

SESSION_INTERFACE = "org.gnome.Mutter.RemoteDesktop.Session"


class DesktopInput:
    """Keys and the pointer of one RemoteDesktop session (``session`` path, ``stream`` path for absolute
    positions); ``monitor_size`` says the virtual monitor's size when a position is placed."""

    def __init__(self, bus: MessageBus, session: str, stream: str, monitor_size: Callable[[], tuple[int, int]]) -> None:
        self.description = "the headless desktop's keyboard and pointer (mutter RemoteDesktop)"
        self._bus = bus
        self._session = session
        self._monitor_size = monitor_size
        self._remote = RemoteInput(stream, monitor_size())
        self.calls_sent = 0
        self.calls_failed = 0
        self._send(first_key_fix())

    def rebind(self, session: str, stream: str) -> None:
        """Into another RemoteDesktop session (mutter started again): what comes next goes there."""
        self._session = session
        self._remote = RemoteInput(stream, self._monitor_size())
        self._send(first_key_fix())

    def write(self, device: str, events: Sequence[Event]) -> None:
        self._remote.monitor = self._monitor_size()
        self._send(self._remote.calls(device, events))

    def _send(self, calls: list[RemoteCall]) -> None:
        if not self._bus.connected:
            return  # the desktop is closing
        for call in calls:
            sent = self._bus.send(
                Message(
                    destination="org.gnome.Mutter.RemoteDesktop",
                    path=self._session,
                    interface=SESSION_INTERFACE,
                    member=call.member,
                    signature=call.signature,
                    body=list(call.args),
                    flags=MessageFlag.NO_REPLY_EXPECTED,
                )
            )
            sent.add_done_callback(self._sent)
            self.calls_sent += 1

    def _sent(self, sent: asyncio.Future[None]) -> None:
        if not sent.cancelled() and sent.exception() is not None:
            self.calls_failed += 1

    def close(self) -> None:
        pass  # the session ends with the desktop's bus connection
