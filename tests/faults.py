"""Helpers for the fault tests: real host and viewer processes, their sockets, memory and counters."""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyrofling.bench.soak import process_usage
from pyrofling.bench.stream import _wait_for_port, free_port
from pyrofling.wire import (
    ControlFramer,
    Cookie,
    GamepadState,
    Kick,
    KickFlags,
    PhaseOffset,
    Ping,
    ProtocolError,
    UnknownControl,
)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "pyrofling", *args]


def read_stats(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def wait_for(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s:g} s")
        time.sleep(0.05)


def rss_mb(proc: subprocess.Popen[bytes]) -> float:
    usage = process_usage(proc.pid)
    assert usage is not None, f"{proc.args!r} is gone"
    return usage.rss_bytes / 2**20


def _udp_rows(pid: int) -> list[list[str]]:
    """The /proc/net/udp{,6} rows of this process's UDP sockets."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    rows = []
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        rows += [fields for line in lines if (fields := line.split())[9] in inodes]
    return rows


def udp_drops(pid: int) -> int:
    """Datagrams the kernel dropped on this process's UDP sockets (a full receive buffer): /proc/net/udp."""
    return sum(int(fields[-1]) for fields in _udp_rows(pid))


def udp_unread_bytes(pid: int) -> int:
    """Bytes waiting, unread, in this process's UDP receive buffers (the rx_queue of /proc/net/udp)."""
    return sum(int(fields[4].split(":")[1], 16) for fields in _udp_rows(pid))


class HostProcess:
    """``pyrofling host`` on loopback, small and quiet, rewriting its statistics twice a second."""

    def __init__(self, tmp: Path, *args: str, fps: int = 30, bitrate_kbits: int = 800) -> None:
        self.port = free_port()
        self.stats_path = tmp / "host.json"
        cmd = cli("host", "-q", "--port", str(self.port), "--width", "320", "--height", "240", "--fps", str(fps),
                  "--bitrate-kbits", str(bitrate_kbits), "--no-audio", "--virtual-pad", "none",
                  "--stats-json", str(self.stats_path), "--stats-interval", "0.5", *args)  # fmt: skip
        self.proc = subprocess.Popen(cmd, env=dict(os.environ, PYTHONUNBUFFERED="1"), stderr=subprocess.PIPE)
        _wait_for_port(self.port, self.proc, timeout_s=30)

    def stats(self) -> dict[str, Any]:
        return read_stats(self.stats_path)

    def encoded(self) -> int:
        """Frames encoded so far (as of the last statistics the host wrote, at most half a second old)."""
        return int(self.stats().get("frames_encoded", 0))

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(2)
        _, err = self.proc.communicate(timeout=20)
        return self.proc.returncode, err.decode(errors="replace")


class ViewerProcess:
    """``pyrofling view --headless`` with its statistics rewritten twice a second."""

    def __init__(self, tmp: Path, port: int, *args: str, name: str = "viewer", duration_s: float = 120) -> None:
        self.stats_path = tmp / f"{name}.json"
        cmd = cli("view", f"pyro://127.0.0.1:{port}", "-q", "--headless", "--no-audio", "--duration",
                  str(duration_s), "--stats-json", str(self.stats_path), "--stats-interval", "0.5", *args)  # fmt: skip
        self.proc = subprocess.Popen(cmd, env=dict(os.environ, PYTHONUNBUFFERED="1"), stderr=subprocess.PIPE)

    def stats(self) -> dict[str, Any]:
        return read_stats(self.stats_path)

    def shown(self) -> int:
        return int(self.stats().get("frames_shown", 0))

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(2)
        _, err = self.proc.communicate(timeout=20)
        return self.proc.returncode, err.decode(errors="replace")


def kill(*procs: HostProcess | ViewerProcess | NetsimProcess | None) -> None:
    for p in procs:
        if p is not None and p.proc.poll() is None:
            p.proc.kill()
            p.proc.communicate(timeout=10)


def mutate(rng: random.Random, data: bytes) -> bytes:
    """A bit flip, a truncation, an extension, a splice or a byte run: what a broken or hostile network sends."""
    buf = bytearray(data)
    kind = rng.randrange(5)
    if kind == 0 and buf:
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif kind == 1:
        del buf[rng.randrange(len(buf) + 1) :]
    elif kind == 2:
        buf += rng.randbytes(rng.randrange(1, 64))
    elif kind == 3 and buf:
        start = rng.randrange(len(buf))
        buf[start : start + 8] = rng.randbytes(8)
    else:
        buf[rng.randrange(len(buf) + 1) :] = bytes([rng.randrange(256)]) * rng.randrange(0, 200)
    return bytes(buf)


def hostile_viewer_datagrams(rng: random.Random, count: int) -> list[bytes]:
    """Random bytes, and mutations of every message a viewer sends by UDP (with made-up cookies)."""
    templates = [
        bytes(Cookie(rng.getrandbits(64))),
        bytes(Ping(rng.randrange(256))),
        bytes(PhaseOffset(rng.randrange(-10_000, 10_000))),
        bytes(GamepadState(seq=rng.randrange(1 << 16), buttons=rng.randrange(1 << 16))),
        bytes(Kick(KickFlags.VIDEO)),
        b"PYRS" + rng.randbytes(8) + rng.randbytes(40),  # sealed-looking
    ]
    out = []
    for i in range(count):
        if i % 3 == 0:
            out.append(rng.randbytes(rng.choice((0, 1, 3, 7, 8, 16, 24, 100, 1200, 1472))))
        else:
            out.append(mutate(rng, rng.choice(templates)))
    return out


class HostileRelay:
    """Stands between a viewer and its host on loopback, as a hostile network path would.

    It relays TCP and UDP both ways and can slip extra datagrams and whole control messages into
    the host → viewer direction, from the address the viewer talks to (so the viewer's connected
    socket takes them).  The control stream is parsed and re-framed as it passes, so what is
    injected always falls between two messages.
    """

    def __init__(self, host_port: int) -> None:
        self.host_port = host_port
        self.port = free_port()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.front.bind(("127.0.0.1", self.port))
        self.back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.back.connect(("127.0.0.1", host_port))
        self.viewer_udp: tuple[str, int] | None = None
        self.viewer_tcp: socket.socket | None = None
        self.tcp_lock = threading.Lock()
        self.recent: deque[bytes] = deque(maxlen=256)  # host → viewer datagrams, templates for mutation
        self.closed = False
        for target in (self._accept, self._up, self._down):
            threading.Thread(target=target, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:  # the viewer may reconnect
                viewer, _ = self.listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.host_port), timeout=5)
                upstream.settimeout(None)
                self.viewer_tcp = viewer
                threading.Thread(target=self._tcp_up, args=(viewer, upstream), daemon=True).start()
                threading.Thread(target=self._tcp_down, args=(upstream, viewer), daemon=True).start()

    def _tcp_up(self, viewer: socket.socket, upstream: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := viewer.recv(65536):
                upstream.sendall(data)
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)

    def _tcp_down(self, upstream: socket.socket, viewer: socket.socket) -> None:
        framer: ControlFramer | None = ControlFramer()
        with contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                if framer is None:  # sealed records from here on: passed through as they come
                    with self.tcp_lock:
                        viewer.sendall(data)
                    continue
                framer.push(data)
                while True:
                    try:
                        msg = framer.next()
                    except ProtocolError:  # the handshake ended and records began
                        with self.tcp_lock:
                            viewer.sendall(framer.take_rest())
                        framer = None
                        break
                    if msg is None:
                        break
                    assert not isinstance(msg, UnknownControl)
                    with self.tcp_lock:
                        viewer.sendall(bytes(msg))
        with contextlib.suppress(OSError):
            viewer.shutdown(socket.SHUT_WR)

    def _up(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                data, addr = self.front.recvfrom(65536)
                self.viewer_udp = addr
                self.back.send(data)

    def _down(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                data = self.back.recv(65536)
                self.recent.append(data)
                if self.viewer_udp is not None:
                    self.front.sendto(data, self.viewer_udp)

    def inject_control(self, messages: bytes) -> bool:
        """Whole control messages into the host → viewer stream; False once the viewer's connection is gone."""
        if self.viewer_tcp is None:
            return False
        try:
            with self.tcp_lock:
                self.viewer_tcp.sendall(messages)
        except OSError:
            return False
        return True

    def close(self) -> None:
        for s in (self.listener, self.front, self.back, self.viewer_tcp):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.close()


class NetsimProcess:
    """``pyrofling netsim`` between a viewer and the host, impairing the host → viewer direction."""

    def __init__(self, tmp: Path, host_port: int, *impairment: str) -> None:
        self.port = free_port()
        self.out = tmp / "netsim.json"
        cmd = cli("netsim", "--upstream", f"127.0.0.1:{host_port}", "--listen", f"127.0.0.1:{self.port}",
                  "--json", *impairment)  # fmt: skip
        with self.out.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE)
        _wait_for_port(self.port, self.proc, timeout_s=15)

    def stop(self) -> dict[str, Any]:
        self.proc.send_signal(2)
        self.proc.communicate(timeout=20)
        return read_stats(self.out)
