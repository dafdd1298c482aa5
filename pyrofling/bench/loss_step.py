"""``pyrofling bench loss-step``: how the redundancy follows a step in loss (0 → 5 % → 0), in simulated time.

The host's pure sessions (adaptive FEC planner, resends) and the viewer's pure
connection (reassembler, loss tracker, NACKs and LOSS_REPORTs) talk through the
netsim loss model with a fake clock: the same code paths as a real stream, a
minute of stream in a few seconds, the same result every run.  Frames are random
bytes of the stream's size (the codec plays no part in what redundancy is sent).
Every ``bucket_s`` it records the repair share of what was sent, the planner's
loss estimate, the loss the link really had, and the frames that did not
complete.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import asdict, dataclass
from typing import Any

from pyrofling.core.host.keyframes import KeyframePolicy
from pyrofling.core.host.pacer import UnpacedPacer
from pyrofling.core.host.packetizer import MediaPacket, Packetizer
from pyrofling.core.host.sessions import HostSessions
from pyrofling.core.host.state import SendControl
from pyrofling.core.viewer.connection import ControlToHost, DatagramToHost, DecodeVideo, ViewerConnection
from pyrofling.core.viewer.session import ViewerSessionConfig
from pyrofling.fec.planner import AdaptivePlanner, make_planner
from pyrofling.wire import CodecParameters, KickFlags


@dataclass(frozen=True, slots=True)
class StepConfig:
    fps: int = 60
    bitrate_kbits: int = 10_000
    loss: float = 0.05
    before_s: float = 2.0
    during_s: float = 4.0
    after_s: float = 6.0
    one_way_delay_s: float = 0.002
    planner: str = "adaptive"
    bucket_s: float = 0.1
    seed: int = 1

    @property
    def duration_s(self) -> float:
        return self.before_s + self.during_s + self.after_s

    def loss_at(self, t: float) -> float:
        return self.loss if self.before_s <= t < self.before_s + self.during_s else 0.0


PARAMS = CodecParameters(1, 1, 0, 60, 1, 1280, 720, 0, 0)


def run(cfg: StepConfig) -> dict[str, Any]:
    rng = random.Random(cfg.seed)
    planner_name = cfg.planner

    def make_packetizer(cookie: int) -> Packetizer:
        return Packetizer.for_cookie(cookie, video_planner=make_planner(planner_name))

    # Unpaced: a frame's datagrams leave together (this bench's link has no queue to spare them).
    host = HostSessions(make_packetizer=make_packetizer, keyframes=KeyframePolicy(), make_pacer=UnpacedPacer)
    host.codec_parameters = PARAMS
    viewer = ViewerConnection(ViewerSessionConfig(flags=KickFlags.VIDEO))
    address = ("127.0.0.1", 40000)
    events: list[tuple[float, int, str, bytes]] = []
    order = itertools.count()
    buckets: list[dict[str, float]] = []

    def bucket(t: float) -> dict[str, float]:
        i = int(t / cfg.bucket_s)
        while len(buckets) <= i:
            buckets.append(dict.fromkeys(("data", "repair", "resent", "sent", "lost", "frames", "incomplete"), 0.0))
        return buckets[i]

    def to_viewer(data: bytes, now: float, *, counted: bool = True) -> None:
        b = bucket(now)
        b["sent"] += counted
        if rng.random() < cfg.loss_at(now):
            b["lost"] += counted
            return
        heapq.heappush(events, (now + cfg.one_way_delay_s, next(order), "down", data))

    def transmit(now: float, *, counted: bool) -> int:
        """What the host sends now (``counted``: a frame's datagrams, not replies or resends); how many."""
        datagrams = host.datagrams_to_send(now)
        for d in datagrams:
            bucket(now)["resent"] += d.resend
            to_viewer(d.data, now, counted=counted)
        return len(datagrams)

    def perform(outputs: list[Any], now: float) -> None:
        for out in outputs:
            if isinstance(out, ControlToHost):
                for reply in host.tcp_received(1, out.data, now):
                    if isinstance(reply, SendControl):
                        perform(viewer.control_bytes(reply.data, now), now)
            elif isinstance(out, DatagramToHost):
                host.datagram(address, out.data, now)
                transmit(now, counted=False)
            elif isinstance(out, DecodeVideo):
                bucket(now)["frames"] += 1

    host.open(1, ("127.0.0.1", 50000), 0.0, cookie=0x5EED)
    perform(viewer.start(0.0), 0.0)
    conn = host.connection(1)
    assert conn is not None and conn.packetizer is not None
    packetizer = conn.packetizer
    frame_bytes = cfg.bitrate_kbits * 1000 // 8 // cfg.fps
    period = 1.0 / cfg.fps
    frames = int(cfg.duration_s * cfg.fps)
    for i in range(frames):
        heapq.heappush(events, (0.01 + i * period, next(order), "frame", b""))
    while events:
        now, _, kind, data = heapq.heappop(events)
        due = viewer.next_timer()
        while due is not None and due <= now:
            perform(viewer.handle_timer(due), due)
            due = viewer.next_timer()
        if kind == "down":
            perform(viewer.datagram_received(data, now), now)
        else:
            size = int(frame_bytes * rng.uniform(0.8, 1.2))
            payload = b"\x00\x00\x00\x01\x65" + rng.randbytes(size)  # key-flagged so every packet decodes
            host.send_video(MediaPacket(payload, int(now * 1e6), key_frame=True), idr=True, now=now)
            sent = transmit(now, counted=True)
            n = -(-len(payload) // 1024)
            b = bucket(now)
            b["data"] += n
            b["repair"] += sent - n
    lost_frames = viewer.counters()["packets_lost_video"]
    estimate = packetizer.video_planner.loss_estimate if isinstance(packetizer.video_planner, AdaptivePlanner) else None
    series = []
    for i, b in enumerate(buckets):
        series.append(
            {
                "t": round(i * cfg.bucket_s, 3),
                "link_loss": cfg.loss_at(i * cfg.bucket_s),
                "measured_loss": b["lost"] / b["sent"] if b["sent"] else 0.0,
                "repair_share": b["repair"] / b["data"] if b["data"] else 0.0,
                "resent_share": b["resent"] / b["data"] if b["data"] else 0.0,
            }
        )
    return {
        "config": asdict(cfg),
        "series": series,
        "frames": frames,
        "frames_lost": lost_frames,
        "final_loss_estimate": estimate,
        "rise_s": _time_to(series, cfg.before_s, lambda r: r["repair_share"] >= _level(series, cfg, during=True) * 0.9),
        "decay_s": _time_to(
            series,
            cfg.before_s + cfg.during_s,
            lambda r: r["repair_share"] <= _level(series, cfg, during=False) * 1.1 + 0.01,
        ),
        "counters": dict(viewer.counters()),
    }


def _level(series: list[dict[str, float]], cfg: StepConfig, *, during: bool) -> float:
    """The settled repair share: over the last second of the lossy period, or of the run before the step."""
    if during:
        end = cfg.before_s + cfg.during_s
    else:
        end = cfg.before_s
    window = [r["repair_share"] for r in series if end - 1.0 <= r["t"] < end]
    return sum(window) / len(window) if window else 0.0


def _time_to(series: list[dict[str, float]], start: float, reached: Any) -> float | None:
    for r in series:
        if r["t"] >= start and reached(r):
            return round(r["t"] - start, 3)
    return None


def format_table(result: dict[str, Any]) -> str:
    c = result["config"]
    lines = [
        f"loss step: {c['bitrate_kbits'] / 1000:g} Mbit/s at {c['fps']} fps, planner {c['planner']}, "
        f"{c['loss']:.0%} i.i.d. loss from {c['before_s']:g} s to {c['before_s'] + c['during_s']:g} s, "
        f"{c['one_way_delay_s'] * 1000:g} ms each way (simulated time)",
        f"{'t (s)':>6} {'link loss':>10} {'measured':>9} {'repair share':>13} {'resent share':>13}",
    ]
    for r in result["series"][:: max(1, int(0.5 / c["bucket_s"]))]:
        lines.append(
            f"{r['t']:>6.1f} {r['link_loss']:>10.1%} {r['measured_loss']:>9.1%} {r['repair_share']:>13.1%} "
            f"{r['resent_share']:>13.1%}"
        )
    rise, decay = result["rise_s"], result["decay_s"]
    lines.append(
        f"repair reached 90 % of its lossy level {rise if rise is not None else '-'} s after the step up; "
        f"back within 10 % of its clean level {decay if decay is not None else '-'} s after the step down"
    )
    lines.append(f"frames lost (after FEC and resends): {result['frames_lost']} of {result['frames']}")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result["series"]
    t = [r["t"] for r in s]
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.plot(t, [100 * r["link_loss"] for r in s], label="link loss %", color="black", linestyle="--")
    ax.plot(t, [100 * r["measured_loss"] for r in s], label="datagrams lost %", color="grey", alpha=0.6)
    ax.plot(t, [100 * r["repair_share"] for r in s], label="repair / data %", color="tab:blue")
    ax.plot(t, [100 * r["resent_share"] for r in s], label="resent / data %", color="tab:orange")
    ax.set_xlabel("time, s")
    ax.set_ylabel("%")
    ax.set_title(f"Redundancy after a loss step ({result['config']['planner']} planner)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
