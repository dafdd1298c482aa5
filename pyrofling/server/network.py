"""The host's sockets: TCP control and UDP media on one port (protocol.md §1), moved through HostSessions.

It moves bytes.  What each connection reads, every datagram, each connection opening or
closing goes into :class:`~pyrofling.core.host.sessions.HostSessions` with the time
it was read, and this module performs what comes back: writes, closes and log
lines (gamepad input, phase feedback and bitrate changes go to the host through
``on_output``).  Then one transmit: every datagram
:meth:`~pyrofling.core.host.sessions.HostSessions.datagrams_to_send` releases,
and one timer for :meth:`~pyrofling.core.host.sessions.HostSessions.next_timer`
(pacing, keep-alive, authentication deadlines).

``bind`` ``localhost`` (the default) listens on both loopbacks, 127.0.0.1 and
::1, so ``pyro://127.0.0.1`` and ``pyro://[::1]`` both reach the host; any other
address is used as it is (``0.0.0.0`` or ``::`` open it to the network).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import Callable, Sequence
from typing import Any

from pyrofling import logs
from pyrofling.clocks import SYSTEM_CLOCK, Clock
from pyrofling.core.host.sessions import HostSessions
from pyrofling.core.host.state import Address, CloseConnection, Compute, HostOutput, LogLine, SendControl
from pyrofling.core.host.web_viewers import WebOutput
from pyrofling.server.crypto_worker import CryptoWorker, WorkerDied
from pyrofling.server.segments import SOL_UDP, UDP_SEGMENT, segment_runs, segment_size
from pyrofling.server.stats import HostStats
from pyrofling.timers import DeadlineTimer

log = logging.getLogger(__name__)

#: Control replies queued for a connection before it counts as not reading them (and is closed).
CONTROL_BACKLOG_BYTES = 64 * 1024
#: Datagrams read per wake-up at most, so a flood cannot starve the rest of the event loop.
READ_BATCH = 256
#: Connections accepted per wake-up at most.
ACCEPT_BATCH = 64
#: What ``--bind localhost`` listens on.
LOOPBACKS = ("127.0.0.1", "::1")
#: After an accept fails (out of descriptors), the listener rests this long before it tries again.
ACCEPT_PAUSE_S = 0.5
#: Its line, held to a rate (:mod:`pyrofling.logs`): a stranger can cause it.
accept_log = logging.getLogger(__name__ + ".accept")
logs.limit(accept_log.name)


class _WatchedSocket:
    """A non-blocking socket whose readiness the event loop reports to :meth:`ready`, until :meth:`close`."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.closed = False
        asyncio.get_running_loop().add_reader(sock.fileno(), self.ready)

    def ready(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.sock.close()


class _UdpSocket(_WatchedSocket):
    """One bound UDP socket: each wake-up reads every datagram waiting (up to :data:`READ_BATCH`).

    asyncio's datagram transport reads one datagram a wake-up, so each cost a trip round the event loop: under a
    flood the kernel's buffer overflowed while the loop was busy going round, and a viewer's own loss reports
    and NACKs were lost with the attacker's datagrams.  Sends go straight out; a full send buffer loses the
    datagram, as the link would (the pacer keeps far below that).
    """

    def __init__(
        self, sock: socket.socket, on_datagram: Callable[[bytes, Address], None], after: Callable[[], None]
    ) -> None:
        self.on_datagram = on_datagram
        self.after = after  # once per wake-up, after its datagrams: one transmit for all of them
        super().__init__(sock)

    def ready(self) -> None:
        try:
            for _ in range(READ_BATCH):
                if self.closed:
                    return
                try:
                    data, addr = self.sock.recvfrom(65536)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as exc:  # ICMP unreachable from a viewer that went away: the keep-alive drops it
                    log.debug("UDP error: %s", exc)
                    continue
                self.on_datagram(data, addr)
        finally:
            self.after()

    #: Whether runs go out in one call (:data:`UDP_SEGMENT`); off for good once the system refuses one.
    segmenting = True

    def send_run(self, run: list[bytes], addr: Address) -> tuple[int, int]:
        """Datagrams of one size (the last may be shorter) to one address, in one call where the system segments
        them, else one by one; how many left and their bytes (an error loses what it was for, as the link
        would)."""
        if len(run) > 1 and self.segmenting:
            data = b"".join(run)
            try:
                self.sock.sendmsg([data], [(SOL_UDP, UDP_SEGMENT, segment_size(run))], 0, addr)
                return len(run), len(data)
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.EIO, errno.ENOPROTOOPT, errno.EOPNOTSUPP):
                    return 0, 0  # a full buffer or an unreachable peer: the whole run is lost, as it would be
                self.segmenting = False
                log.info("this system does not segment UDP sends (%s): each datagram goes on its own", exc)
        sent = sent_bytes = 0
        for data in run:
            try:
                self.sock.sendto(data, addr)
            except OSError:
                continue
            sent += 1
            sent_bytes += len(data)
        return sent, sent_bytes


class _Listener(_WatchedSocket):
    """One listening TCP socket: each wake-up accepts what waits (up to :data:`ACCEPT_BATCH`) and hands each
    connection's socket to ``on_accept``. A connection the sessions refuse (too many, or too fast from its
    address) is closed there before asyncio builds a transport, a reader and a task for it: under a connection
    flood those cost the loop that paces media about ten times the refusal."""

    def __init__(self, sock: socket.socket, on_accept: Callable[[socket.socket, Address], None]) -> None:
        self.on_accept = on_accept
        super().__init__(sock)

    def ready(self) -> None:
        for _ in range(ACCEPT_BATCH):
            if self.closed:
                return
            try:
                conn, peer = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                # Out of descriptors, say: the socket stays readable, so trying again at the next wake-up spun the
                # loop and wrote a line each time (115 k lines in 20 s). Pause, and say so at a bounded rate.
                accept_log.warning("could not accept a connection: %s (trying again in %g s)", exc, ACCEPT_PAUSE_S)
                self._pause()
                return
            self.on_accept(conn, peer)

    def _pause(self) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(self.sock.fileno())

        def resume() -> None:
            if not self.closed:
                loop.add_reader(self.sock.fileno(), self.ready)

        loop.call_later(ACCEPT_PAUSE_S, resume)


class HostNetwork:
    """:meth:`listen`, then it runs on the event loop until :meth:`close`."""

    def __init__(
        self,
        sessions: HostSessions,
        *,
        stats: HostStats,
        on_output: Callable[[HostOutput], None],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``clock``: the time everything read is stamped with, and the sessions' deadlines are on."""
        self.sessions = sessions
        self._clock = clock
        self.stats = stats
        self.port: int | None = None
        #: The addresses actually listened on.
        self.addresses: list[str] = []
        self._on_output = on_output
        self._listeners: list[_Listener] = []
        self._udp: dict[int, _UdpSocket] = {}  # by address family
        self._writers: dict[int, asyncio.StreamWriter] = {}
        self._accepted: dict[int, socket.socket] = {}  # admitted, its streams not made yet
        self._tasks: set[asyncio.Task[None]] = set()
        #: A process for the PAKE's slow steps (:class:`Compute`), so they never hold the loop that paces media,
        #: nor the interpreter lock the encoder needs.
        self._crypto = CryptoWorker()
        self._timer = DeadlineTimer(lambda: self.perform(self.sessions.handle_timer(clock.now())), clock)
        #: The web shell's way to carry out the browsers' outputs (``host --web``; None: no browsers).
        self.browser_outputs: Callable[[list[WebOutput]], None] | None = None
        self._next_conn_id = 1
        self._closing = False

    # -- lifecycle -----------------------------------------------------------------------------

    async def listen(self, bind: str, port: int) -> int:
        """Listen on TCP and UDP at ``port`` (0: one free for both, on every address); returns the port."""
        addresses = list(LOOPBACKS) if bind == "localhost" else [bind]
        for _attempt in range(20):
            try:
                bound = await self._bind_all(addresses, port)
            except _PortTaken:
                continue  # port 0: the port the first socket got is taken on another; try another
            self.port = bound
            if self.sessions.auth_required:
                await self._crypto.started()  # now, so the first handshake does not wait for its interpreter
            return bound
        raise OSError("could not find a port free for both TCP and UDP on every address")

    async def _bind_all(self, addresses: list[str], port: int) -> int:
        any_port = port == 0
        for i, address in enumerate(addresses):
            try:
                listening = _listening_tcp(address, port)
                port = listening.getsockname()[1]  # the first address fixes the port when it was 0
                self._listeners.append(_Listener(listening, self._on_accept))
                udp = _bound_udp(address, port)
            except OSError as exc:
                if address == "::1" and i > 0 and exc.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
                    log.debug("no IPv6 loopback here (%s): listening on IPv4 only", exc)
                    continue
                self._close_sockets()
                if any_port and exc.errno == errno.EADDRINUSE:
                    raise _PortTaken from exc
                raise
            self._udp[udp.family] = _UdpSocket(udp, self._datagram, self.transmit)
            self.addresses.append(address)
        return port

    def _close_sockets(self) -> None:
        for listener in self._listeners:
            listener.close()
        for udp in self._udp.values():
            udp.close()
        self._listeners.clear()
        self._udp.clear()
        self.addresses.clear()

    async def close(self) -> None:
        self._closing = True
        self._timer.cancel()
        for writer in list(self._writers.values()):
            writer.close()
        for sock in self._accepted.values():
            sock.close()
        self._accepted.clear()
        self._close_sockets()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=1.0)
        self._crypto.close()

    def _datagram(self, data: bytes, addr: Address) -> None:
        """One datagram of a batch: the batch's transmit follows it (:class:`_UdpSocket`)."""
        self.perform(self.sessions.datagram(addr, data, self._clock.now()), transmit=False)

    # -- control channel -----------------------------------------------------------------------

    def _on_accept(self, sock: socket.socket, peer: Address) -> None:
        conn_id = self._next_conn_id
        self._next_conn_id += 1
        outputs = self.sessions.open(conn_id, peer, self._clock.now())
        if any(isinstance(o, CloseConnection) and o.conn_id == conn_id for o in outputs):
            sock.close()  # refused before a word (too many, or too fast): nothing else to do, under a flood often
            return
        self._accepted[conn_id] = sock
        if outputs:  # another connection made room for it
            self.perform(outputs)
        task = asyncio.get_running_loop().create_task(self._on_connection(conn_id, sock, peer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _on_connection(self, conn_id: int, sock: socket.socket, peer: Address) -> None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            reader, writer = await asyncio.open_connection(sock=sock)
        except OSError as exc:
            self.drop(conn_id, f"connection error: {exc}")
            return
        if self._accepted.pop(conn_id, None) is None:  # closed meanwhile (made room for another, say)
            writer.close()
            return
        self._writers[conn_id] = writer
        log.info("connection %d from %s", conn_id, format_address(peer))
        reason = "closed by viewer"
        try:
            while not self._closing and (data := await reader.read(4096)):
                self.perform(self.sessions.tcp_received(conn_id, data, self._clock.now()))
                if conn_id not in self._writers:
                    reason = "dropped"
                    break
                # A read returns at once while bytes are buffered: let pacing, timers and the other viewers run
                # between two chunks, so one connection's burst cannot hold the loop.
                await asyncio.sleep(0)
        except (ConnectionError, OSError) as exc:
            reason = f"connection error: {exc}"
        finally:
            self.drop(conn_id, reason)

    def drop(self, conn_id: int, reason: str) -> None:
        conn = self.sessions.connection(conn_id)
        self.perform(self.sessions.close(conn_id))
        accepted = self._accepted.pop(conn_id, None)
        if accepted is not None:  # no streams yet: the socket itself
            accepted.close()
        writer = self._writers.pop(conn_id, None)
        if writer is not None:
            writer.close()
            log.info("connection %d%s ended: %s", conn_id, f" ({conn.label})" if conn else "", reason)

    def perform(self, outputs: Sequence[HostOutput | WebOutput], *, transmit: bool = True) -> None:
        """Carry out what the sessions said, then :meth:`transmit` (unless the caller will). The browsers' outputs
        (their core's deadlines are the sessions') go to the web shell."""
        to_browsers: list[WebOutput] = []
        for out in outputs:
            if not isinstance(out, HostOutput):
                to_browsers.append(out)
            elif isinstance(out, SendControl):
                writer = self._writers.get(out.conn_id)
                if writer is not None and not writer.is_closing():
                    writer.write(out.data)  # one message, one write (TCP_NODELAY is on)
                    if writer.transport.get_write_buffer_size() > CONTROL_BACKLOG_BYTES:
                        self.perform(self.sessions.not_reading(out.conn_id))
            elif isinstance(out, LogLine):
                log.info("%s", out.text)
            elif isinstance(out, CloseConnection):
                self.drop(out.conn_id, out.reason)
            elif isinstance(out, Compute):
                self._compute(out)
            else:
                self._on_output(out)
        if to_browsers and self.browser_outputs is not None:
            self.browser_outputs(to_browsers)
        if transmit:
            self.transmit()

    def handshake_cpu_s(self) -> float:
        """CPU time the handshake worker process used (the PAKE's slow steps)."""
        return self._crypto.cpu_s()

    def _compute(self, job: Compute) -> None:
        if self._closing:
            return
        done = asyncio.wrap_future(self._crypto.submit(job.work))  # a step that raised comes back as its error
        done.add_done_callback(lambda f: self._computed(job, f))

    def _computed(self, job: Compute, done: asyncio.Future[Any]) -> None:
        if self._closing or done.cancelled():
            return
        error = done.exception()
        if error is not None:  # this handshake times out, the viewer tries again
            log.warning("a handshake step failed (%s)", error)
            if isinstance(error, WorkerDied):
                self._crypto.failed()  # the next step starts a new worker
            return
        self.perform(job.then(done.result(), self._clock.now()))

    def rearm(self) -> None:
        """The sessions' next deadline changed outside :meth:`perform` (a browser's message): the one timer."""
        if not self._closing:
            self._timer.arm(self.sessions.next_timer())

    def transmit(self) -> None:
        """Send every datagram the sessions release now, runs of one size together; arm the one timer for their
        next deadline.  Asked again after sending something: a packet's repair is computed only once the data
        before it has been handed out, so the data is on the wire first and the repair follows in the same turn,
        not a wake-up later (an ask that released nothing leaves nothing waiting behind it)."""
        now = self._clock.now()
        for _ in range(2):
            due = self.sessions.datagrams_to_send(now)
            if not due:
                break
            for addr, run in segment_runs(due):
                self._send(run, addr)
        if not self._closing:
            self._timer.arm(self.sessions.next_timer())

    def _send(self, run: list[bytes], addr: Address) -> None:
        """Datagrams to one address, now, from the socket of its family."""
        udp = self._udp.get(socket.AF_INET6 if ":" in str(addr[0]) else socket.AF_INET)
        if udp is None or udp.closed:
            return
        sent, sent_bytes = udp.send_run(run, addr)
        self.stats.send_errors += len(run) - sent
        self.stats.datagrams_sent += sent
        self.stats.bytes_sent += sent_bytes


def _listening_tcp(address: str, port: int) -> socket.socket:
    """A TCP socket listening on ``address`` and ``port`` (an IPv6 one for IPv6 only)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return socket.create_server((address, port), family=family, backlog=128)


def _bound_udp(address: str, port: int) -> socket.socket:
    """A UDP socket bound to ``address`` and ``port`` (the first of its addresses that binds, as asyncio does),
    with buffers for bursts of video and of viewers' reports."""
    error: OSError | None = None
    for family, kind, proto, _, sockaddr in socket.getaddrinfo(address, port, type=socket.SOCK_DGRAM):
        sock = socket.socket(family, kind, proto)
        try:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 1024 * 1024)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024 * 1024)
            sock.bind(sockaddr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        return sock
    raise error or OSError(f"no address for {address!r}")


class _PortTaken(Exception):
    """A free port for the first address was taken on another one."""


def format_address(addr: Any) -> str:
    if not addr:
        return "?"
    return f"[{addr[0]}]:{addr[1]}" if ":" in str(addr[0]) else f"{addr[0]}:{addr[1]}"


def uri_host(bind: str) -> str:
    """What a viewer on this machine or the network types for a host bound to ``bind``."""
    if bind in ("0.0.0.0", "::", ""):
        return "HOST"
    if bind == "localhost":
        return "127.0.0.1"
    return f"[{bind}]" if ":" in bind else bind
