"""The host's socket shell (pyrofling.server.network) on real loopback sockets, with a recording core."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import time
from typing import Any

import pytest

from pyrofling.core.host.state import Address, HostOutput, SendDatagram
from pyrofling.server.network import READ_BATCH, HostNetwork
from pyrofling.server.segments import GSO_MAX_BYTES, GSO_MAX_SEGMENTS, segment_runs
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


def _d(addr: Address, data: bytes) -> SendDatagram:
    return SendDatagram(addr, data)


def test_datagrams_go_to_the_kernel_in_runs_of_one_size_to_one_address() -> None:
    a, b = ("127.0.0.1", 1000), ("127.0.0.1", 2000)
    frame = [_d(a, bytes(1100))] * 5 + [_d(a, bytes(300))]
    runs = segment_runs([*frame, _d(a, bytes(1100)), _d(b, bytes(1100)), _d(b, bytes(1200)), _d(a, bytes(1100))])
    assert [(addr, [len(x) for x in run]) for addr, run in runs] == [
        (a, [1100] * 5 + [300]),  # a shorter last one ends the run it joins
        (a, [1100]),
        (b, [1100]),
        (b, [1200]),  # a longer one starts another
        (a, [1100]),
    ]
    many = segment_runs([_d(a, bytes(100))] * (GSO_MAX_SEGMENTS + 1) + [_d(b, bytes(1400))] * 50)
    assert [len(run) for _, run in many] == [GSO_MAX_SEGMENTS, 1, GSO_MAX_BYTES // 1400, 50 - GSO_MAX_BYTES // 1400]
    assert segment_runs([]) == []


class _ReleasingSessions(_RecordingSessions):
    """Releases ``frame`` once two viewers said hello, each datagram to the viewer its index names."""

    def __init__(self, frame: list[tuple[int, bytes]]) -> None:
        super().__init__()
        self.frame = frame
        self.to: list[Address] = []

    def datagram(self, addr: Address, data: bytes, now: float) -> list[HostOutput]:
        self.datagrams.append((data, addr, self.turn))
        self.to.append(addr)
        return []

    def datagrams_to_send(self, now: float) -> list[SendDatagram]:
        if len(self.to) < 2:
            return []
        out = [SendDatagram(self.to[i], data) for i, data in self.frame]
        self.frame = []
        return out


class _RefusingSegments(socket.socket):
    """A system that cannot segment UDP sends (an old kernel): every segmented send is refused."""

    def sendmsg(self, *args: Any, **kwargs: Any) -> int:
        raise OSError(errno.EIO, "segmentation offload not supported")


@pytest.mark.parametrize("system", ["segments", "refuses"])
def test_a_frame_sent_in_runs_arrives_datagram_by_datagram_in_order_and_counted(system: str) -> None:
    """A 1080p frame's 40 datagrams (the last short) to a viewer, then one to a second viewer: each arrives on its
    own and whole, in order, and the statistics count each. A system that refuses segmented sends gets the same,
    one datagram at a time, and is not asked again."""
    payloads = [bytes([i]) * 1100 for i in range(39)] + [b"\xff" * 333]
    frame = [(0, p) for p in payloads] + [(1, b"second viewer")]

    async def scenario() -> tuple[list[bytes], list[bytes], HostStats, Any]:
        core = _ReleasingSessions(frame)
        stats = HostStats()
        network = HostNetwork(core, stats=stats, on_output=lambda out: None)  # type: ignore[arg-type]
        port = await network.listen("127.0.0.1", 0)
        udp = network._udp[socket.AF_INET]
        if system == "refuses":
            refusing = _RefusingSegments(socket.AF_INET, socket.SOCK_DGRAM, fileno=os.dup(udp.sock.fileno()))
            refusing.setblocking(False)
            udp.sock.close()
            udp.sock = refusing
        viewers = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
        got: list[list[bytes]] = [[], []]
        try:
            for v in viewers:
                v.bind(("127.0.0.1", 0))
                v.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
                v.setblocking(False)
            viewers[0].sendto(b"hello", ("127.0.0.1", port))
            await asyncio.sleep(0.05)
            viewers[1].sendto(b"hello", ("127.0.0.1", port))
            deadline = time.monotonic() + 5.0
            while (len(got[0]) < 40 or not got[1]) and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
                for v, into in zip(viewers, got, strict=True):
                    with contextlib.suppress(BlockingIOError):
                        while True:
                            into.append(v.recv(65536))
        finally:
            for v in viewers:
                v.close()
            await network.close()
        return got[0], got[1], stats, udp.segmenting

    first, second, stats, segmenting = asyncio.run(asyncio.wait_for(scenario(), 10.0))
    assert first == payloads
    assert second == [b"second viewer"]
    assert stats.datagrams_sent == 41 and stats.send_errors == 0
    assert stats.bytes_sent == sum(map(len, payloads)) + len(b"second viewer")
    assert segmenting == (system == "segments")


class _RepairAfterDataSessions(_RecordingSessions):
    """A core like the host's with a packet whose repair it computes only once the data has been taken: the data on
    one ask, the repair on the next (noting how many datagrams the shell had sent by then); no timer."""

    def __init__(self, stats: HostStats, data: list[bytes], repair: list[bytes]) -> None:
        super().__init__()
        self.stats, self.data, self.repair = stats, data, repair
        self.sent_when_repair_asked: int | None = None

    def datagram(self, addr: Address, data: bytes, now: float) -> list[HostOutput]:
        self.datagrams.append((data, addr, self.turn))
        return []

    def datagrams_to_send(self, now: float) -> list[SendDatagram]:
        if not self.datagrams:
            return []
        to = self.datagrams[0][1]
        if self.data:
            out, self.data = self.data, []
            return [SendDatagram(to, d) for d in out]
        if self.repair:
            self.sent_when_repair_asked = self.stats.datagrams_sent
            out, self.repair = self.repair, []
            return [SendDatagram(to, d) for d in out]
        return []


def test_a_packets_data_is_on_the_wire_before_its_repair_is_asked_for_and_the_repair_follows_without_a_timer() -> None:
    data = [bytes([i]) * 1100 for i in range(20)]
    repair = [bytes([0x80 + i]) * 1100 for i in range(4)]

    async def scenario() -> tuple[list[bytes], int | None]:
        stats = HostStats()
        core = _RepairAfterDataSessions(stats, data, repair)
        network = HostNetwork(core, stats=stats, on_output=lambda out: None)  # type: ignore[arg-type]
        port = await network.listen("127.0.0.1", 0)
        loop = asyncio.get_running_loop()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as viewer:
            viewer.bind(("127.0.0.1", 0))
            viewer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            viewer.setblocking(False)
            viewer.sendto(b"hello", ("127.0.0.1", port))
            got = [await loop.sock_recv(viewer, 65536) for _ in range(len(data) + len(repair))]
        await network.close()
        return got, core.sent_when_repair_asked

    got, sent_when_repair_asked = asyncio.run(asyncio.wait_for(scenario(), 10.0))
    assert got == data + repair  # the core's next_timer is None: only the shell's second ask can have sent the repair
    assert sent_when_repair_asked == len(data)
