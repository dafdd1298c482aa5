"""The loss-simulating relay: a thin asyncio shell around two :class:`Impairment` objects.

It listens on one port for TCP and UDP, as a PyroFling server does, so a viewer
can point at it instead of the host.  TCP connections are piped to the
upstream host unchanged (control traffic is reliable in the real protocol too),
host → client at most at the ``down`` direction's bottleneck rate where it has one.
Each client's UDP source address gets its own upstream socket, so the host sees
one stable address per client; datagrams are impaired per direction:
``down`` (host → viewer, the media) and ``up`` (viewer → host).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from dataclasses import dataclass, field
from typing import Any, cast

from pyrofling.netsim.models import BytePacer, Impairment, ImpairmentConfig

log = logging.getLogger(__name__)

#: Distinct client UDP addresses one relay serves (each costs an upstream socket).
MAX_UDP_CLIENTS = 256


@dataclass(frozen=True, slots=True)
class RelayConfig:
    """Where the relay listens and forwards, and what each direction suffers."""

    upstream_host: str
    upstream_port: int
    listen_host: str = "127.0.0.1"
    listen_port: int = 0  # 0: pick a free port
    down: ImpairmentConfig = field(default_factory=ImpairmentConfig)
    up: ImpairmentConfig = field(default_factory=ImpairmentConfig)
    seed: int = 1
    #: Report which datagrams host → viewer were dropped (``report()["down"]["dropped_at"]``).
    record_drops: bool = False


class _ClientSide(asyncio.DatagramProtocol):
    """The listening UDP socket: datagrams from viewers."""

    def __init__(self, relay: NetsimRelay) -> None:
        self.relay = relay

    def datagram_received(self, data: bytes, addr: tuple[Any, ...]) -> None:
        self.relay._from_client(data, addr)


class _UpstreamSide(asyncio.DatagramProtocol):
    """One per viewer: the socket that talks to the host on its behalf."""

    def __init__(self, relay: NetsimRelay, client: tuple[Any, ...]) -> None:
        self.relay = relay
        self.client = client
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[Any, ...]) -> None:
        self.relay._from_upstream(data, self.client)

    def error_received(self, exc: Exception) -> None:
        log.debug("upstream UDP error for %s: %s", self.client, exc)


class NetsimRelay:
    """Start with :meth:`start`, stop with :meth:`close`; :meth:`report` gives the counts."""

    def __init__(self, config: RelayConfig) -> None:
        self.config = config
        self.down = Impairment(config.down, seed=config.seed, record_drops=config.record_drops)
        self.up = Impairment(config.up, seed=config.seed + 1)
        self.tcp_connections = 0
        #: Viewers (UDP source addresses) relayed so far, including those gone since.
        self.udp_clients = 0
        self.refused_clients = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listen: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self._upstreams: dict[tuple[Any, ...], _UpstreamSide] = {}
        self._pending: set[tuple[Any, ...]] = set()
        self._backlog: dict[tuple[Any, ...], list[bytes]] = {}
        self._pipes: set[asyncio.Task[None]] = set()
        self.address: tuple[str, int] = (config.listen_host, config.listen_port)
        #: When the relay started listening (the schedules' time 0), on the monotonic clock.
        self.started_s: float | None = None

    async def start(self) -> tuple[str, int]:
        """Bind TCP and UDP on the same port; returns the bound (host, port)."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        cfg = self.config
        self._tcp = await asyncio.start_server(self._pipe_tcp, cfg.listen_host, cfg.listen_port, reuse_address=True)
        sock = self._tcp.sockets[0]
        host, port = sock.getsockname()[:2]
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _ClientSide(self), local_addr=(host, port), family=sock.family
        )
        self._listen = transport
        self.address = (host, port)
        self.started_s = loop.time()
        self.down.start(self.started_s)
        self.up.start(self.started_s)
        log.info("netsim relay on %s:%d -> %s:%d", host, port, cfg.upstream_host, cfg.upstream_port)
        return self.address

    async def close(self) -> None:
        if self._tcp is not None:
            self._tcp.close()
            with contextlib.suppress(Exception):
                await self._tcp.wait_closed()
        for task in list(self._pipes):
            task.cancel()
        for task in list(self._pipes):
            with contextlib.suppress(BaseException):
                await task
        if self._listen is not None:
            self._listen.close()
        for side in self._upstreams.values():
            if side.transport is not None:
                side.transport.close()
        self._upstreams.clear()

    def report(self) -> dict[str, Any]:
        return {
            "listen": f"{self.address[0]}:{self.address[1]}",
            "upstream": f"{self.config.upstream_host}:{self.config.upstream_port}",
            "tcp_connections": self.tcp_connections,
            "udp_clients": self.udp_clients,
            "refused_clients": self.refused_clients,
            "down": self.down.stats.as_dict()
            | ({} if self.down.dropped_at is None else {"dropped_at": list(self.down.dropped_at)}),
            "up": self.up.stats.as_dict(),
            "started_monotonic_s": self.started_s,
            "schedule_applied": {"down": self.down.applied, "up": self.up.applied},
        }

    # --- UDP -----------------------------------------------------------------------------

    def _schedule(self, impairment: Impairment, data: bytes, send: Any) -> None:
        loop = self._loop
        assert loop is not None
        now = loop.time()
        for t in impairment.process(now, len(data)):
            if t <= now:
                send(data)
            else:
                loop.call_at(t, send, data)

    def _from_client(self, data: bytes, addr: tuple[Any, ...]) -> None:
        side = self._upstreams.get(addr)
        if side is None:
            if addr in self._pending:
                self._backlog[addr].append(data)
                return
            if len(self._upstreams) + len(self._pending) >= MAX_UDP_CLIENTS:
                self.refused_clients += 1
                return
            self._pending.add(addr)
            self._backlog[addr] = [data]
            task = asyncio.ensure_future(self._open_upstream(addr))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)
            return

        def send(payload: bytes, side: _UpstreamSide = side) -> None:
            if side.transport is not None and not side.transport.is_closing():
                side.transport.sendto(payload)

        self._schedule(self.up, data, send)

    async def _open_upstream(self, addr: tuple[Any, ...]) -> None:
        loop = asyncio.get_running_loop()
        cfg = self.config
        try:
            _, side = await loop.create_datagram_endpoint(
                lambda: _UpstreamSide(self, addr), remote_addr=(cfg.upstream_host, cfg.upstream_port)
            )
        except OSError as exc:
            log.warning("cannot open upstream UDP for %s: %s", addr, exc)
            self._pending.discard(addr)
            self._backlog.pop(addr, None)
            return
        self._upstreams[addr] = side
        self.udp_clients += 1
        self._pending.discard(addr)
        for data in self._backlog.pop(addr, []):
            self._from_client(data, addr)

    def _from_upstream(self, data: bytes, client: tuple[Any, ...]) -> None:
        def send(payload: bytes) -> None:
            if self._listen is not None and not self._listen.is_closing():
                self._listen.sendto(payload, client)

        self._schedule(self.down, data, send)

    # --- TCP -----------------------------------------------------------------------------

    async def _pipe_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.tcp_connections += 1
        cfg = self.config
        try:
            up_reader, up_writer = await asyncio.open_connection(cfg.upstream_host, cfg.upstream_port)
        except OSError as exc:
            log.warning("cannot reach upstream %s:%d: %s", cfg.upstream_host, cfg.upstream_port, exc)
            writer.close()
            return
        for w in (writer, up_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, pacer: BytePacer | None) -> None:
            loop = asyncio.get_running_loop()
            try:
                while data := await src.read(16384 if pacer is not None else 65536):
                    if pacer is not None:
                        await asyncio.sleep(max(0.0, pacer.crossed_at(len(data), loop.time()) - loop.time()))
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.close()

        down = BytePacer(cfg.down.rate_bits_per_s) if cfg.down.rate_bits_per_s > 0 else None
        tasks = [
            asyncio.ensure_future(pump(reader, up_writer, None)),
            asyncio.ensure_future(pump(up_reader, writer, down)),
        ]
        for t in tasks:
            self._pipes.add(t)
            t.add_done_callback(self._pipes.discard)
        await asyncio.gather(*tasks, return_exceptions=True)
