"""Helpers for the tests that drive real hosts and viewers in-process: every wait has a timeout.

(Process-level helpers for the fault tests are in ``faults.py``; fixtures shared by several files, such as
the X server, are in ``conftest.py``.)
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from websockets.asyncio.client import connect

from pyrofling.server.encoder import EncoderConfig
from pyrofling.server.gamepad import VirtualPad
from pyrofling.server.host import Host, HostConfig
from pyrofling.server.input_devices import InputDevices
from pyrofling.wire import capture

T = TypeVar("T")

#: Small enough to keep a 2-core machine free, large enough for the frame marker and real motion.
SMALL = EncoderConfig(width=320, height=240, fps=30, bitrate_kbits=800)
#: For tests about control, pads and security, where the picture hardly matters.
TINY = EncoderConfig(width=160, height=120, fps=30, bitrate_kbits=300)


def run(coro: Callable[[], Awaitable[T]], timeout_s: float = 60.0) -> T:
    """Run a scenario on a fresh event loop, failing it after ``timeout_s``."""

    async def main() -> T:
        return await asyncio.wait_for(coro(), timeout_s)

    return asyncio.run(main())


def complete_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON lines a program has written to ``path`` so far: each one whose newline is there (the last may be
    half written as the test reads)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().split("\n")[:-1] if line.strip()]


def page_socket(url: str, **options: Any) -> connect:
    """A WebSocket to a host's ``/stream`` held as a page holds one: it takes in all that comes (no queue limit).
    With websockets' limit, a test that stops reading leaves pictures unread, and its close then waits 10 s for
    the host's answer behind them."""
    return connect(url, max_queue=None, **options)


async def until(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait until ``check()`` holds (TimeoutError after ``timeout_s``)."""

    async def poll() -> None:
        while not check():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), timeout_s)


async def type_until_seen(link: Any, seen: Callable[[], bool], key: str = "A", attempts: int = 200) -> None:
    """Press and let go ``key`` on a viewer's keyboard link until a program says it got it (its window may take a
    moment to come up and have the keyboard, and may get it between a press and its release: ``seen`` says which
    it needs); a program that never does fails the caller's own check."""
    for _ in range(attempts):
        link.key(key, True)
        await asyncio.sleep(0.05)
        link.key(key, False)
        await asyncio.sleep(0.05)
        if seen():
            return


async def start_host(
    *,
    encoder: EncoderConfig = SMALL,
    pad: VirtualPad | None = None,
    input_devices: InputDevices | None = None,
    pad_factory: Callable[[int], VirtualPad] | None = None,
    port: int = 0,
    **config: Any,
) -> tuple[Host, asyncio.Task[Any]]:
    """A host on a free port (no status lines), running until :func:`stop_host`."""
    host = Host(
        HostConfig(port=port, encoder=encoder, status_interval_s=0, **config),
        pad=pad,
        input_devices=input_devices,
        pad_factory=pad_factory,
    )
    task = asyncio.create_task(host.run())
    await asyncio.wait_for(host.ready.wait(), 15)
    return host, task


async def stop_host(host: Host, task: asyncio.Task[Any]) -> None:
    host.stop()
    await asyncio.wait_for(task, 10)


class PathAttacker:
    """Someone on the path between a viewer and a host, on real sockets: a TCP and UDP relay on one port that
    passes every write and datagram through ``tamper(direction, data)`` ("tcp>"/"udp>" towards the host,
    "tcp<"/"udp<" towards the viewer; return other bytes, or None to drop them) and can splice bytes of its
    own into the live TCP connections (:meth:`inject`)."""

    def __init__(self, upstream_port: int, tamper: Callable[[str, bytes], bytes | None] | None = None) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.tamper = tamper or (lambda _d, data: data)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._udp: asyncio.DatagramTransport | None = None
        self._to_host: dict[Any, asyncio.DatagramTransport] = {}
        self._waiting: dict[Any, list[bytes]] = {}
        self._writers: dict[str, list[asyncio.StreamWriter]] = {"tcp>": [], "tcp<": []}
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._on_tcp, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        self._udp, _ = await loop.create_datagram_endpoint(
            lambda: _Datagrams(self._from_viewer), local_addr=("127.0.0.1", self.port)
        )
        return self.port

    def inject(self, direction: str, data: bytes) -> int:
        """Write ``data`` into every live connection, towards the host ("tcp>") or the viewer ("tcp<")."""
        live = [w for w in self._writers[direction] if not w.is_closing()]
        for w in live:
            w.write(data)
        return len(live)

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        for ws in self._writers.values():
            for w in ws:
                w.close()
        if self._server is not None:
            self._server.close()
        if self._udp is not None:
            self._udp.close()
        for transport in self._to_host.values():
            transport.close()

    async def _on_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        self._writers["tcp>"].append(up_writer)
        self._writers["tcp<"].append(writer)
        for src, dst, d in ((reader, up_writer, "tcp>"), (up_reader, writer, "tcp<")):
            task = asyncio.create_task(self._pipe(src, dst, d))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, direction: str) -> None:
        try:
            while data := await src.read(4096):
                out = self.tamper(direction, data)
                if out is not None:
                    dst.write(out)
        except (ConnectionError, OSError):
            pass
        finally:
            dst.close()

    def _from_viewer(self, data: bytes, addr: Any) -> None:
        out = self.tamper("udp>", data)
        if out is None:
            return
        side = self._to_host.get(addr)
        if side is not None:
            side.sendto(out)
            return
        if addr in self._waiting:
            self._waiting[addr].append(out)
            return
        self._waiting[addr] = [out]
        task = asyncio.create_task(self._open_to_host(addr))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _open_to_host(self, addr: Any) -> None:
        loop = asyncio.get_running_loop()

        def back(data: bytes, _from: Any) -> None:
            out = self.tamper("udp<", data)
            if out is not None and self._udp is not None:
                self._udp.sendto(out, addr)

        transport, _ = await loop.create_datagram_endpoint(lambda: _Datagrams(back), remote_addr=self.upstream)
        self._to_host[addr] = transport
        for data in self._waiting.pop(addr, []):
            transport.sendto(data)


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, on: Callable[[bytes, Any], None]) -> None:
        self.on = on

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.on(data, addr)


async def stop_viewer_and_host(
    viewer: Any, viewer_task: asyncio.Task[Any], host: Host, host_task: asyncio.Task[Any]
) -> None:
    """Stop the viewer, then the host, waiting at most 10 s for each to finish."""
    viewer.stop()
    await asyncio.wait_for(viewer_task, 10)
    await stop_host(host, host_task)


def parse_capture_message(data: bytes, payloads: Mapping[int, Any]) -> None:
    """Unpack a capture-socket message and parse its payload with the class ``payloads`` names for its type
    (none: only the header); raises ProtocolError on anything malformed (the fuzz tests' one allowed error)."""
    header, body = capture.unpack(data)
    cls = payloads.get(header.type)
    if cls is not None:
        cls.parse_payload(body)


def ours(pid: int) -> bool:
    """Whether process ``pid`` was started by this test process's worker (the whole suite runs over several, each
    maybe with a desktop of its own): it carries our worker's name in its environment. Not under xdist: all are."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return True
    try:
        return f"PYTEST_XDIST_WORKER={worker}\0".encode() in Path(f"/proc/{pid}/environ").read_bytes() + b"\0"
    except OSError:
        return False
