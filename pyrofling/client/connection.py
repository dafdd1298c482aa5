"""One connection's sockets, moved through a pure :class:`~pyrofling.core.viewer.connection.ViewerConnection`.

TCP control and UDP media to one host: what arrives goes into the connection
with the time it was read, the bytes it answers go out, and one timer follows
its next deadline.  Everything else it decides (packets to decode
or play, the stream starting, failing or stalling) is handed to ``deliver``:
the :class:`~pyrofling.client.viewer.Viewer` acts on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from pyrofling.client.arrival_clock import ArrivalClock
from pyrofling.core.viewer.connection import (
    ControlToHost,
    DatagramToHost,
    SessionFailed,
    StreamStalled,
    ViewerConnection,
    ViewerOutput,
)
from pyrofling.timers import DeadlineTimer

log = logging.getLogger(__name__)


#: Datagrams read per wake-up at most, so a flood cannot starve the rest of the event loop.
READ_BATCH = 256


class _MediaSocket:
    """The connected UDP socket: each wake-up reads every datagram waiting, each stamped with its arrival.

    Reading them all at once matters for timing, not only for speed: the connection's timers judge a packet by
    when its datagrams arrived (kernel stamps), so the time is handed to it only after what has arrived is read
    (:meth:`drain`).  Otherwise a viewer busy for a few milliseconds would see a frame's tail as lost while it
    sits unread in the socket, count it, and ask for it again.
    """

    def __init__(
        self, sock: socket.socket, on_datagram: Callable[[bytes, float], None], on_drained: Callable[[], None]
    ) -> None:
        self.sock = sock
        self.on_datagram = on_datagram
        #: After each wake-up's datagrams: the timer is armed once for them all (no timer can fire while they
        #: are read, so arming after each was the same deadline worked out ten times a frame).
        self.on_drained = on_drained
        self.clock = ArrivalClock(sock)
        self.closed = False
        asyncio.get_running_loop().add_reader(sock.fileno(), self.drain)

    def drain(self) -> None:
        try:
            self._read()
        finally:
            self.on_drained()

    def _read(self) -> None:
        for _ in range(READ_BATCH):
            if self.closed:
                return
            try:
                data = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # ICMP refused while the host restarts: reported once, then reading goes on
                log.debug("UDP error: %s", exc)
                continue
            self.on_datagram(data, self.clock.now())

    def send(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            self.sock.send(data)
        except OSError as exc:  # a full send buffer or a refused port: a datagram lost, as on the way
            log.debug("UDP send failed: %s", exc)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.sock.close()


class ConnectionIO:
    """``await open()``, then :meth:`perform` the connection's first outputs and ``await`` :meth:`ended`."""

    def __init__(self, conn: ViewerConnection, deliver: Callable[[ViewerOutput], None]) -> None:
        self.conn = conn
        self.peer: Any = None
        self._deliver = deliver
        self._writer: asyncio.StreamWriter | None = None
        self._udp: _MediaSocket | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._timer = DeadlineTimer(self._on_timer)
        self._ended: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def open(self, host: str, port: int, timeout_s: float) -> str | None:
        """Connect TCP, then UDP to the same address; None, or why it failed in words."""
        where = f"{host} port {port}"
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
        except (OSError, TimeoutError) as exc:
            return f"cannot connect to {where}: {os_error(exc) or 'no answer'}"
        sock = writer.get_extra_info("socket")
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._writer, self.peer = writer, writer.get_extra_info("peername")
        try:
            udp = _connected_udp(sock.family if sock is not None else socket.AF_INET, self.peer)
        except OSError as exc:
            writer.close()
            return f"cannot open a UDP socket to {where}: {os_error(exc)}"
        self._udp = _MediaSocket(
            udp, lambda data, now: self.perform(self.conn.datagram_received(data, now), arm=False), self._arm
        )
        self._reader_task = asyncio.create_task(self._read_control(reader))
        return None

    def perform(self, outputs: list[ViewerOutput], *, arm: bool = True) -> None:
        """Send what is for the host, pass the rest on, re-arm the timer (``arm``: now, else the caller will)."""
        for out in outputs:
            if isinstance(out, DatagramToHost):
                if self._udp is not None:
                    self._udp.send(out.data)
            elif isinstance(out, ControlToHost):
                if self._writer is not None and not self._writer.is_closing():
                    self._writer.write(out.data)
            else:
                if isinstance(out, SessionFailed):
                    self.end(out.reason)
                elif isinstance(out, StreamStalled):
                    self.end(f"no media for {out.silent_s:.1f} s")
                self._deliver(out)
        if arm:
            self._arm()

    def _arm(self) -> None:
        if not self._ended.done():
            self._timer.arm(self.conn.next_timer())

    def _on_timer(self) -> None:
        if self._udp is not None:
            self._udp.drain()  # what has arrived first: the time must not run ahead of unread datagrams
        self.perform(self.conn.handle_timer(time.monotonic()))

    def end(self, reason: str) -> None:
        if not self._ended.done():
            self._ended.set_result(reason)

    async def ended(self, stop: asyncio.Event) -> str:
        """Why the connection ended ("stopped" when ``stop`` was set first); the sockets are closed after."""
        stopping: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait([self._ended, stopping], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            self.end("stopped")
            await self._close()
        return self._ended.result()

    async def _close(self) -> None:
        self._timer.cancel()
        if self._reader_task is not None:
            self._reader_task.cancel()
        if self._udp is not None:
            self._udp.close()
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._writer.wait_closed(), 1.0)

    async def _read_control(self, reader: asyncio.StreamReader) -> None:
        try:
            while data := await reader.read(4096):
                self.perform(self.conn.control_bytes(data, time.monotonic()))
            self.perform(self.conn.control_closed())
            self.end("the host closed the connection")
        except (ConnectionError, OSError) as exc:
            self.perform(self.conn.control_closed())
            self.end(f"control connection error: {os_error(exc)}")


def _connected_udp(family: int, peer: Any) -> socket.socket:
    """A non-blocking UDP socket connected to the address TCP reached (so both go to the same host)."""
    udp = socket.socket(family, socket.SOCK_DGRAM)
    try:
        udp.setblocking(False)
        with contextlib.suppress(OSError):
            udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        udp.connect(peer)
    except OSError:
        udp.close()
        raise
    return udp


def os_error(exc: BaseException) -> str:
    """An OSError as a person reads it: 'connection refused', not '[Errno 111] Connect call failed (…)'."""
    if isinstance(exc, OSError) and exc.errno:
        text = os.strerror(exc.errno)
        return text[0].lower() + text[1:]
    return str(exc)
