"""The host's socket shell (pyrofling.server.network) on real loopback sockets, with a recording core."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest

from pyrofling.core.host.state import Address, HostOutput, SendDatagram
from pyrofling.server.network import READ_BATCH, HostNetwork
from pyrofling.server.stats import HostStats

#: Every test here streams, serves or plays through real sockets, threads or processes (not the quick tier).
pytestmark = pytest.mark.io


class _RecordingSessions:
    """What the shell hands the core: each datagram with the loop turn it came in; it echoes the first one."""

    #: No handshakes here: the network starts no worker for them.
    auth_required = False

    def __init__(self) -> None:
        self.turn = 0
        self.datagrams: list[tuple[bytes, Address, int]] = []
        self._replies: list[SendDatagram] = []

    def datagram(self, addr: Address, data: bytes, now: float) -> list[HostOutput]:
        self.datagrams.append((data, addr, self.turn))
        if len(self.datagrams) == 1:
            self._replies.append(SendDatagram(addr, b"echo " + data))
        return []

    def datagrams_to_send(self, now: float) -> list[SendDatagram]:
        replies, self._replies = self._replies, []
        return replies

    def next_timer(self) -> float | None:
        return None


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_a_burst_of_datagrams_reaches_the_core_in_a_wake_up_or_two_and_replies_go_to_the_sender(family: str) -> None:
    """A flood must not cost a trip round the event loop per datagram (asyncio's datagram transport did: the
    kernel dropped a third of a hostile flood, and viewers' reports with it)."""
    if family == "ipv6" and not _has_ipv6_loopback():
        pytest.skip("no IPv6 loopback on this machine")
    loopback = "::1" if family == "ipv6" else "127.0.0.1"
    burst = READ_BATCH + 44

    async def scenario() -> tuple[_RecordingSessions, bytes, Any]:
        core = _RecordingSessions()

        async def count_turns() -> None:
            while True:
                core.turn += 1
                await asyncio.sleep(0)

        network = HostNetwork(core, stats=HostStats(), on_output=lambda out: None)  # type: ignore[arg-type]
        port = await network.listen(loopback, 0)
        turns = asyncio.create_task(count_turns())
        with socket.socket(socket.AF_INET6 if family == "ipv6" else socket.AF_INET, socket.SOCK_DGRAM) as viewer:
            viewer.bind((loopback, 0))
            for i in range(burst):
                viewer.sendto(b"%d" % i, (loopback, port))
            time.sleep(0.05)  # the loop is busy (an encode) while the burst arrives: all of it waits in the socket
            deadline = time.monotonic() + 5.0
            while len(core.datagrams) < burst and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
            viewer.settimeout(5.0)
            echo = viewer.recv(64)
            own = viewer.getsockname()
        turns.cancel()
        await network.close()
        return core, echo, own

    core, echo, own = asyncio.run(asyncio.wait_for(scenario(), 10.0))
    assert [data for data, _, _ in core.datagrams] == [b"%d" % i for i in range(burst)]
    assert {addr[:2] for _, addr, _ in core.datagrams} == {own[:2]}
    turns = sorted({turn for _, _, turn in core.datagrams})
    assert len(turns) <= 2, f"{burst} waiting datagrams took {len(turns)} turns of the event loop"
    assert echo == b"echo 0"
