"""``--source wayland``: the Wayland desktop the person sits at, through the desktop portal's ScreenCast.

On the person's session bus (``DBUS_SESSION_BUS_ADDRESS``; the connection passes
file descriptors) the host asks ``org.freedesktop.portal.ScreenCast`` for a session,
one monitor, and starts it: the first time the desktop asks the person which
monitor to share (GNOME's "Screen Share" dialog); the restore token the answer
carries is kept beside the pairings (:class:`~pyrofling.pairing.PortalToken`), so
the next start asks nothing. ``OpenPipeWireRemote`` gives a connection to the
desktop's PipeWire that sees only the shared stream, recorded as the headless
desktop's are (:class:`~pyrofling.server.headless.frames.MonitorFrames`). The
portal answers each request with a ``Response`` signal on a path made of the
request's token, listened for before the call. What the requests mean is
:mod:`pyrofling.core.host.portal`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from dbus_fast import Message, MessageFlag, MessageType, Variant
from dbus_fast.aio import MessageBus
from dbus_fast.errors import DBusError

from pyrofling.core.host.headless import RemoteCall, RemoteInput, first_key_fix
from pyrofling.core.host.portal import (
    INSTALL,
    KEYBOARD,
    POINTER,
    PORTAL,
    PORTAL_PATH,
    REMOTE_DESKTOP,
    SCREEN_CAST,
    first_stream,
    portal_input_call,
    request_path,
    response_problem,
    select_devices,
    select_sources,
)
from pyrofling.core.input.pad.state import Event
from pyrofling.pairing import PortalToken
from pyrofling.server.headless.frames import MonitorFrames, RecordedDesktop
from pyrofling.server.input_devices import InputDevices, NullInput

log = logging.getLogger(__name__)

#: How long the person has to answer the portal's question, and the bus a call.
ANSWER_S = 300.0
CALL_S = 30.0
#: How often the watch looks at the recording (s), and how long without a frame means the share ended.
WATCH_S = 0.25
SILENCE_S = 5.0


class PortalError(Exception):
    """The portal is missing, refused, or the person declined: a line that says what to do."""


def _plain(value: Any) -> Any:
    """D-Bus variants, in dictionaries and lists too, as their values."""
    if isinstance(value, Variant):
        return _plain(value.value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class DesktopPortal:
    """One session of the portal on ``bus`` (which must pass file descriptors): a screen cast, or with
    ``remote_input`` a remote desktop (the screen and, where the person allows it, the keyboard and pointer)."""

    def __init__(self, bus: MessageBus, *, remote_input: bool = False) -> None:
        self.bus = bus
        self.remote_input = remote_input
        self.session = ""
        #: The devices the person allowed (RemoteDesktop's keyboard 1 | pointer 2; 0 for a screen cast).
        self.devices = 0
        #: The session was closed by the desktop (the person stopped sharing).
        self.closed = False
        self._tokens = (f"pyrofling{os.getpid()}_{n}" for n in itertools.count())
        self._answers: dict[str, asyncio.Future[tuple[int, dict[str, Any]]]] = {}
        bus.add_message_handler(self._signal)

    async def start(self, cursor: str, restore_token: str | None) -> tuple[int, int | None, int | None, str | None]:
        """(PipeWire node, width, height, the next restore token): asks the person unless the token still serves."""
        for interface, member in (("Request", "Response"), ("Session", "Closed")):
            rule = f"type='signal',interface='org.freedesktop.portal.{interface}',member='{member}'"
            await self._call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "AddMatch", "s",
                             [rule])  # fmt: skip
        kind = REMOTE_DESKTOP if self.remote_input else SCREEN_CAST
        results = await self._request(kind, "CreateSession", "", {"session_handle_token": ("s", next(self._tokens))})
        self.session = str(results["session_handle"])
        if self.remote_input:
            version = await self._version(REMOTE_DESKTOP)
            await self._request(REMOTE_DESKTOP, "SelectDevices", self.session, select_devices(restore_token, version))
        options = select_sources(cursor, restore_token, remember=not self.remote_input)
        await self._request(SCREEN_CAST, "SelectSources", self.session, options)
        results = await self._request(kind, "Start", self.session, {}, parent_window="")
        self.devices = int(results.get("devices", 0))
        stream = first_stream(results)
        return stream.node, stream.width, stream.height, results.get("restore_token")

    async def _version(self, interface: str) -> int:
        call = Message(destination=PORTAL, path=PORTAL_PATH, interface="org.freedesktop.DBus.Properties",
                       member="Get", signature="ss", body=[interface, "version"])  # fmt: skip
        reply = await asyncio.wait_for(self.bus.call(call), CALL_S)
        if reply is None or reply.message_type == MessageType.ERROR:
            return 1
        return int(_plain(reply.body[0]))

    async def open_pipewire(self) -> int:
        """A connection to the desktop's PipeWire that sees the shared stream (a file descriptor, now ours)."""
        call = Message(destination=PORTAL, path=PORTAL_PATH, interface=SCREEN_CAST, member="OpenPipeWireRemote",
                       signature="oa{sv}", body=[self.session, {}])  # fmt: skip
        try:
            reply = await asyncio.wait_for(self.bus.call(call), CALL_S)
        except (DBusError, TimeoutError) as exc:
            raise PortalError(f"the desktop portal gave no PipeWire connection: {exc}") from None
        if reply is None or reply.message_type == MessageType.ERROR or not reply.unix_fds:
            raise PortalError("the desktop portal gave no PipeWire connection")
        return int(reply.unix_fds[reply.body[0]])

    async def _request(
        self,
        interface: str,
        member: str,
        session: str,
        options: dict[str, tuple[str, Any]],
        parent_window: str | None = None,
    ) -> dict[str, Any]:
        token = next(self._tokens)
        answer = asyncio.get_running_loop().create_future()
        self._answers[request_path(self.bus.unique_name or "", token)] = answer
        body: list[Any] = [session] if session else []
        signature = "o" if session else ""
        if parent_window is not None:
            body.append(parent_window)
            signature += "s"
        variants = {k: Variant(sig, value) for k, (sig, value) in {**options, "handle_token": ("s", token)}.items()}
        await self._call(PORTAL, PORTAL_PATH, interface, member, signature + "a{sv}", [*body, variants])
        try:
            code, results = await asyncio.wait_for(answer, ANSWER_S)
        except TimeoutError:
            raise PortalError(f"nobody answered the desktop's question ({member}) within {ANSWER_S:g} s") from None
        problem = response_problem(code, member)
        if problem is not None:
            raise PortalError(problem)
        return results

    async def _call(self, destination: str, path: str, interface: str, member: str, sig: str, body: list[Any]) -> None:
        call = Message(destination=destination, path=path, interface=interface, member=member, signature=sig, body=body)
        try:
            reply = await asyncio.wait_for(self.bus.call(call), CALL_S)
        except DBusError as exc:
            raise PortalError(_portal_problem(str(exc.type), exc.text)) from None
        except TimeoutError:
            raise PortalError(f"the desktop portal did not answer {member} within {CALL_S:g} s") from None
        if reply is not None and reply.message_type == MessageType.ERROR:
            raise PortalError(_portal_problem(str(reply.error_name), str(reply.body[0] if reply.body else "")))

    def _signal(self, message: Message) -> None:
        if message.member == "Closed" and self.session and message.path == self.session:
            self.closed = True  # the person stopped sharing, or the desktop ended the session
            return
        answer = self._answers.pop(message.path or "", None) if message.member == "Response" else None
        if answer is not None and not answer.done():
            code, results = message.body
            answer.set_result((int(code), _plain(results)))


def _portal_problem(error: str, text: str) -> str:
    if error in ("org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.UnknownInterface",
                 "org.freedesktop.DBus.Error.UnknownMethod"):  # fmt: skip
        return f"no desktop portal with screen sharing on this desktop ({text}): {INSTALL}"
    return f"the desktop portal refused: {text or error}"


class PortalInput:
    """The viewers' keys and pointer into the person's desktop through the RemoteDesktop portal: an
    :class:`~pyrofling.server.input_devices.InputDevices`, as the headless desktop's is, its calls the portal's."""

    def __init__(self, portal: DesktopPortal, node: int, monitor_size: Callable[[], tuple[int, int]]) -> None:
        self.description = "the desktop's keyboard and pointer (the RemoteDesktop portal)"
        self._portal, self._node, self._monitor_size = portal, node, monitor_size
        self._remote = RemoteInput("", monitor_size())
        self.calls_sent = 0
        self._send(first_key_fix())

    def write(self, device: str, events: Sequence[Event]) -> None:
        self._remote.monitor = self._monitor_size()
        self._send(self._remote.calls(device, events))

    def _send(self, calls: list[RemoteCall]) -> None:
        bus = self._portal.bus
        if not bus.connected:
            return
        for call in calls:
            member, signature, args = portal_input_call(call, self._portal.session, self._node)
            bus.send(Message(destination=PORTAL, path=PORTAL_PATH, interface=REMOTE_DESKTOP, member=member,
                             signature=signature, body=list(args), flags=MessageFlag.NO_REPLY_EXPECTED))  # fmt: skip
            self.calls_sent += 1

    def close(self) -> None:
        pass  # the session ends with the bus connection


class WaylandSource(RecordedDesktop):
    """The shared monitor as a :class:`~pyrofling.server.sources.VideoSource`; it ends when the person stops
    sharing or the recording fails."""

    def __init__(self, bus: MessageBus, portal: DesktopPortal, frames: MonitorFrames, node: int) -> None:
        super().__init__(frames)
        self.bus, self.portal = bus, portal
        self._started_s = time.monotonic()
        self.input_devices: InputDevices | None = None
        if portal.remote_input:  # the viewers' keys go where the person allowed, or nowhere
            allowed = portal.devices & (KEYBOARD | POINTER) == KEYBOARD | POINTER
            self.input_devices = (
                PortalInput(portal, node, frames.size)
                if allowed
                else NullInput("the person did not allow remote interaction in the desktop's dialog")
            )
        self._watch = asyncio.get_running_loop().create_task(self._supervise())

    async def _supervise(self) -> None:
        while self._ended is None:
            await asyncio.sleep(WATCH_S)
            if self.portal.closed:
                self._ended = "the desktop stopped the screen share"
            elif not self.bus.connected:
                self._ended = "the session bus went away"
            elif time.monotonic() - (self.frames.last_came_s() or self._started_s) > SILENCE_S:
                # PipeWire resends the picture every quarter second while the stream lives: it is gone
                self._ended = f"the desktop sent nothing for {SILENCE_S:g} s (the screen share ended)"
            else:
                self._ended = self._recording_failed()
        log.warning("wayland: %s; the stream ends", self._ended)

    def close(self) -> None:
        self._watch.cancel()
        self.frames.stop()
        self.bus.disconnect()  # the portal ends the session with the connection


async def open_wayland(cursor: str, tokens: PortalToken, *, remote_input: bool = False) -> WaylandSource:
    """Share a monitor of the desktop this host runs in (PortalError: what to do instead); with ``remote_input``
    the viewers' keys and pointer too, where the person allows it."""
    address = os.environ.get("DBUS_SESSION_BUS_ADDRESS")
    if not address:
        raise PortalError("no desktop session here (DBUS_SESSION_BUS_ADDRESS is unset): start the host from a "
                          "terminal of your Wayland desktop, or use --source headless")  # fmt: skip
    try:
        bus = await asyncio.wait_for(MessageBus(bus_address=address, negotiate_unix_fd=True).connect(), CALL_S)
    except (OSError, DBusError, TimeoutError) as exc:
        raise PortalError(f"cannot reach the desktop session's bus ({address}): {exc}") from None
    try:
        portal = DesktopPortal(bus, remote_input=remote_input)
        node, width, height, token = await portal.start(cursor, tokens.get())
        if token:
            tokens.put(token)
        fd = await portal.open_pipewire()
        frames = MonitorFrames(fd, node, "video/x-raw", (width or 1280, height or 720))
        frames.start()
    except BaseException:
        bus.disconnect()
        raise
    log.info("wayland: sharing the desktop's monitor (%sx%s, PipeWire node %d)", width, height, node)
    return WaylandSource(bus, portal, frames, node)
