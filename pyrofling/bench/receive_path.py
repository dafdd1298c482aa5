"""What a stream costs the pure cores per datagram, with no sockets: the host's sessions hand each picture to the
viewer's connection through their outputs, as the two shells do, on one thread in virtual time.

It isolates the Python that runs for every datagram (the host's packetizing, FEC and pacing; the viewer's
header parse, reassembly, loss tracking and timer) from the event loops, system calls and codecs around it, so a
change to that path can be measured on a noisy machine: medians over blocks of pictures.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyrofling.core.host.keyframes import KeyframePolicy
from pyrofling.core.host.packetizer import MediaPacket, Packetizer
from pyrofling.core.host.sessions import HostSessions, SendControl
from pyrofling.core.viewer.connection import ControlToHost, DatagramToHost, DecodeVideo, ViewerConnection
from pyrofling.core.viewer.session import ViewerSessionConfig
from pyrofling.server.config import HostConfig
from pyrofling.wire import CodecParameters, ControlFramer, StreamType, parse_control

_VIEWER_ADDRESS = ("127.0.0.1", 40000)


@dataclass(frozen=True, slots=True)
class ReceivePathConfig:
    bitrate_kbits: int = 20_000
    fps: int = 60
    #: Pictures measured (after a key frame and a block to warm up).
    frames: int = 3000
    #: Pictures a timed block; the medians are over blocks.
    block_frames: int = 100
    seed: int = 1


class _Pair:
    """A host's sessions and one viewer's connection, joined through their outputs (control replies at once,
    datagrams as the host's pacer lets them go)."""

    def __init__(self, fps: int) -> None:
        self.hs = HostSessions(  # the host's own pacer (its default ceiling) and FEC
            make_packetizer=Packetizer.for_cookie, keyframes=KeyframePolicy(), make_pacer=HostConfig().make_pacer
        )
        self.hs.codec_parameters = CodecParameters(1, 1, 3, fps, 1, 1920, 1080, 2, 48_000)
        self.hs.open(1, ("127.0.0.1", 50000), 0.0, cookie=0xC0FFEE)
        self.conn = ViewerConnection(ViewerSessionConfig())
        self.framer = ControlFramer()
        self.decoded = 0
        self.perform(self.conn.start(0.0), 0.0)
        if not self.conn.streaming:
            raise RuntimeError("the in-memory viewer did not start streaming")

    def perform(self, outputs: list[Any], now: float) -> None:
        pending = list(outputs)
        while pending:
            out = pending.pop(0)
            if isinstance(out, ControlToHost):
                for msg in self.framer.feed(out.data):
                    for reply in self.hs.control(1, msg, now):
                        if isinstance(reply, SendControl):
                            pending += self.conn.control_received(parse_control(reply.data), now)
            elif isinstance(out, DatagramToHost):
                self.hs.datagram(_VIEWER_ADDRESS, out.data, now)
            elif isinstance(out, DecodeVideo):
                self.decoded += 1

    def from_host(self, outputs: list[Any], now: float) -> None:
        """What the host's timers said: its control messages to the viewer."""
        for out in outputs:
            if isinstance(out, SendControl):
                self.perform(self.conn.control_received(parse_control(out.data), now), now)


def _picture(rng: random.Random, size: int, key: bool) -> bytes:
    nal = b"\x00\x00\x00\x01" + (b"\x65" if key else b"\x41")
    return nal + rng.randbytes(max(1, size - len(nal)))


def run_receive_path(
    config: ReceivePathConfig | None = None, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Per datagram: the host's µs (send_video, and datagrams_to_send and next_timer at each wake its pacer asks
    for), the viewer's (datagram_received), the viewer's next_timer after each; medians and the fastest block."""
    cfg = config or ReceivePathConfig()
    rng = random.Random(cfg.seed)
    pair = _Pair(cfg.fps)
    hs, conn = pair.hs, pair.conn
    size = max(64, cfg.bitrate_kbits * 1000 // 8 // cfg.fps)
    period = 1 / cfg.fps
    pictures = [_picture(rng, size, key=False) for _ in range(16)]  # reused: the bytes do not change the cost
    host_blocks: list[float] = []
    viewer_blocks: list[float] = []
    timer_blocks: list[float] = []
    datagrams_total = 0
    now = 1.0
    total = cfg.frames + cfg.block_frames  # the first block warms up and is not counted
    for start in range(0, total, cfg.block_frames):
        host_s = viewer_s = timer_s = 0.0
        datagrams = 0
        for i in range(start, min(total, start + cfg.block_frames)):
            now += period
            key = i == 0
            data = _picture(rng, 4 * size, key=True) if key else pictures[i % len(pictures)]
            t0 = time.perf_counter()
            hs.send_video(MediaPacket(data, round(now * 1e6), StreamType.VIDEO, key_frame=key), idr=key, now=now)
            host_s += time.perf_counter() - t0
            wake: float | None = now
            while wake is not None and wake < now + period:  # the host's wakes as its pacer asks for them
                t0 = time.perf_counter()
                said = hs.handle_timer(wake)  # its timers, then what its pacer lets go: as its shell runs them
                sent = hs.datagrams_to_send(wake)
                host_s += time.perf_counter() - t0
                pair.from_host(said, wake)
                for d in sent:
                    a = time.perf_counter()
                    outputs = conn.datagram_received(d.data, wake)
                    b = time.perf_counter()
                    conn.next_timer()
                    c = time.perf_counter()
                    viewer_s += b - a
                    timer_s += c - b
                    if outputs:
                        pair.perform(outputs, wake)
                datagrams += len(sent)
                t0 = time.perf_counter()
                due = hs.next_timer()
                host_s += time.perf_counter() - t0
                wake = None if due is None else max(due, wake + 1e-6)  # time moves on, whatever it says
            due = conn.next_timer()
            if due is not None and due <= now:
                pair.perform(conn.handle_timer(now), now)
        if start == 0 or not datagrams:
            continue
        datagrams_total += datagrams
        host_blocks.append(host_s / datagrams * 1e6)
        viewer_blocks.append(viewer_s / datagrams * 1e6)
        timer_blocks.append(timer_s / datagrams * 1e6)
        if progress is not None and len(viewer_blocks) % 10 == 0:
            median_us = statistics.median(viewer_blocks)
            progress(f"{start + cfg.block_frames} pictures: viewer {median_us:.1f} µs a datagram")
    return {
        "bitrate_kbits": cfg.bitrate_kbits,
        "fps": cfg.fps,
        "frames": cfg.frames,
        "picture_bytes": size,
        "datagrams_per_picture": datagrams_total / max(1, cfg.frames),
        "pictures_decodable": pair.decoded,
        "host_us_per_datagram": statistics.median(host_blocks) if host_blocks else None,
        "host_us_per_datagram_min": min(host_blocks) if host_blocks else None,
        "viewer_us_per_datagram": statistics.median(viewer_blocks) if viewer_blocks else None,
        "viewer_us_per_datagram_min": min(viewer_blocks) if viewer_blocks else None,
        "viewer_next_timer_us": statistics.median(timer_blocks) if timer_blocks else None,
    }


def format_receive_path(r: dict[str, Any]) -> str:
    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    rows = [
        ("stream", f"{r['bitrate_kbits']} kbit/s at {r['fps']} fps: {r['picture_bytes']} bytes a picture"),
        ("datagrams a picture", f"{r['datagrams_per_picture']:.1f} ({r['pictures_decodable']} pictures to decode)"),
        ("host, a datagram", f"{f(r['host_us_per_datagram'])} µs (fastest {f(r['host_us_per_datagram_min'])})"),
        ("viewer, a datagram", f"{f(r['viewer_us_per_datagram'])} µs (fastest {f(r['viewer_us_per_datagram_min'])})"),
        ("viewer's next timer", f"{f(r['viewer_next_timer_us'])} µs, asked after each datagram"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
