"""The relay between real loopback sockets: UDP both ways per client, TCP piped, loss applied."""

import asyncio
import socket

import pytest

from pyrofling.netsim.models import ImpairmentConfig
from pyrofling.netsim.relay import NetsimRelay, RelayConfig

#: Every test here streams, serves or plays through real sockets, threads or processes (not the quick tier).
pytestmark = pytest.mark.io

TIMEOUT_S = 5.0


class Echo(asyncio.DatagramProtocol):
    """The 'host': answers every datagram with a prefixed copy, remembers who sent it."""

    def __init__(self) -> None:
        self.sources: set[tuple[str, int]] = set()
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.sources.add(addr)
        assert self.transport is not None
        self.transport.sendto(b"echo:" + data, addr)


async def _host() -> tuple[asyncio.Server, Echo, asyncio.DatagramTransport, int]:
    async def tcp_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data.upper())
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(tcp_echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    transport, echo = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", port))
    return server, echo, transport, port


async def _udp_client(relay_port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.connect(("127.0.0.1", relay_port))
    s.setblocking(False)
    return s


async def _recv(sock: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    return await asyncio.wait_for(loop.sock_recv(sock, 2048), TIMEOUT_S)


@pytest.mark.timeout(30)
def test_relay_forwards_udp_and_tcp_and_applies_loss() -> None:
    async def main() -> None:
        server, echo, host_udp, host_port = await _host()
        relay = NetsimRelay(
            RelayConfig(upstream_host="127.0.0.1", upstream_port=host_port, down=ImpairmentConfig(loss=0.3), seed=7)
        )
        _, port = await relay.start()
        try:
            # TCP passes unchanged.
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), TIMEOUT_S)
            writer.write(b"hello")
            assert await asyncio.wait_for(reader.readexactly(5), TIMEOUT_S) == b"HELLO"
            writer.close()

            # Two clients: each gets its own stable upstream address.
            a, b = await _udp_client(port), await _udp_client(port)
            a.send(b"first")
            # The first datagram opens the upstream socket; answers pass the 30 % loss or not.
            received = []
            for i in range(200):
                a.send(b"a%d" % i)
            b.send(b"from-b")
            deadline = asyncio.get_running_loop().time() + 2.0
            while asyncio.get_running_loop().time() < deadline:
                try:
                    received.append(await asyncio.wait_for(asyncio.get_running_loop().sock_recv(a, 2048), 0.3))
                except TimeoutError:
                    break
            assert all(r.startswith(b"echo:") for r in received)
            assert 90 < len(received) < 190  # about 70 % of 201 answers
            assert len(echo.sources) == 2
            report = relay.report()
            assert report["udp_clients"] == 2 and report["tcp_connections"] == 1
            assert report["up"]["forwarded"] == 202  # nothing lost upstream
            assert report["down"]["dropped_loss"] > 20
            a.close()
            b.close()
        finally:
            await relay.close()
            server.close()
            host_udp.close()
        assert relay.report()["udp_clients"] == 2  # the final report counts the viewers that have gone too

    asyncio.run(main())


def test_tcp_from_the_host_crosses_the_down_bottleneck_at_its_rate_and_arrives_whole() -> None:
    """A browser's WebSocket through a narrow link: the bytes come at the link's rate (here 2 Mbit/s: 100 kB take
    0.4 s at least), in order and whole; the way up is not held back."""

    async def main() -> None:
        server, _echo, host_udp, host_port = await _host()
        relay = NetsimRelay(
            RelayConfig(upstream_host="127.0.0.1", upstream_port=host_port, down=ImpairmentConfig(rate_bits_per_s=2e6))
        )
        _, port = await relay.start()
        loop = asyncio.get_running_loop()
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), TIMEOUT_S)
            sent = bytes(range(97, 123)) * 4000  # 104 kB of a..z
            started = loop.time()
            writer.write(sent)
            got = await asyncio.wait_for(reader.readexactly(len(sent)), TIMEOUT_S)
            took = loop.time() - started
            writer.close()
        finally:
            await relay.close()
            server.close()
            host_udp.close()
        assert got == sent.upper()  # the echo, whole and in order
        assert took >= len(sent) * 8 / 2e6 * 0.95

    asyncio.run(main())
