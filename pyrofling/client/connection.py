"""One connection's sockets, moved through a pure :class:`~pyrofling.core.viewer_connection.ViewerConnection`.

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
from pyrofling.core.viewer_connection import (
    ControlToHost,
    DatagramToHost,
    SessionFailed,
    StreamStalled,
    ViewerConnection,
    ViewerOutput,
)
from pyrofling.timers import DeadlineTimer

log = logging.getLogger(__name__)


class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, on_datagram: Callable[[bytes, float], None]) -> None:
        self.on_datagram = on_datagram
        self.clock: ArrivalClock | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        self.clock = ArrivalClock(sock) if sock is not None else None

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.on_datagram(data, self.clock.now() if self.clock is not None else time.monotonic())

    def error_received(self, exc: Exception) -> None:
        log.debug("UDP error: %s", exc)  # ICMP refused while the host restarts


class ConnectionIO:
    """``await open()``, then :meth:`perform` the connection's first outputs and ``await`` :meth:`ended`."""

    def __init__(self, conn: ViewerConnection, deliver: Callable[[ViewerOutput], None]) -> None:
        self.conn = conn
        self.peer: Any = None
        self._deliver = deliver
        self._writer: asyncio.StreamWriter | None = None
        self._udp: asyncio.DatagramTransport | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._timer = DeadlineTimer(lambda: self.perform(self.conn.handle_timer(time.monotonic())))
        self._ended: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def open(self, host: str, port: int, timeout_s: float) -> str | None:
        """Connect TCP, then UDP to the same address; None, or why it failed in words."""
        where = f"{host} port {port}"
        loop = asyncio.get_running_loop()
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
        except (OSError, TimeoutError) as exc:
            return f"cannot connect to {where}: {os_error(exc) or 'no answer'}"
        sock = writer.get_extra_info("socket")
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._writer, self.peer = writer, writer.get_extra_info("peername")
        try:
            self._udp, _ = await loop.create_datagram_endpoint(
                lambda: _UdpProtocol(lambda data, now: self.perform(self.conn.datagram_received(data, now))),
                remote_addr=(host, port),
                family=sock.family if sock is not None else socket.AF_INET,
            )
        except OSError as exc:
            writer.close()
            return f"cannot open a UDP socket to {where}: {os_error(exc)}"
        with contextlib.suppress(OSError):
            self._udp.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        self._reader_task = asyncio.create_task(self._read_control(reader))
        return None

    def perform(self, outputs: list[ViewerOutput]) -> None:
        """Send what is for the host, pass the rest on, re-arm the timer."""
        for out in outputs:
            if isinstance(out, DatagramToHost):
                if self._udp is not None and not self._udp.is_closing():
                    self._udp.sendto(out.data)
            elif isinstance(out, ControlToHost):
                if self._writer is not None and not self._writer.is_closing():
                    self._writer.write(out.data)
            else:
                if isinstance(out, SessionFailed):
                    self.end(out.reason)
                elif isinstance(out, StreamStalled):
                    self.end(f"no media for {out.silent_s:.1f} s")
                self._deliver(out)
        if not self._ended.done():
            self._timer.arm(self.conn.next_timer())

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
            self.end("the host closed the connection")
        except (ConnectionError, OSError) as exc:
            self.end(f"control connection error: {os_error(exc)}")


def os_error(exc: BaseException) -> str:
    """An OSError as a person reads it: 'connection refused', not '[Errno 111] Connect call failed (…)'."""
    if isinstance(exc, OSError) and exc.errno:
        text = os.strerror(exc.errno)
        return text[0].lower() + text[1:]
    return str(exc)
