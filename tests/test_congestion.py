"""Rate control, in simulated time: the host's controller and the viewer's feedback around the netsim link model.

A closed loop with a fake clock: frames of the size the controller allows leave paced, cross a simulated
bottleneck (:class:`~pyrofling.netsim.models.Impairment`: rate, drop-tail queue, loss), the viewer's
:class:`~pyrofling.core.viewer.rate_feedback.ArrivalRecorder` stamps them on its own clock and reports every 50 ms,
and the report reaches the controller a few ms later.  What a player would feel is measured on the way:
each frame's queueing delay.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import pytest

from pyrofling.core.host.congestion import LinkController, RateConfig, RateVoter, SharedBitrate
from pyrofling.core.viewer.rate_feedback import ArrivalRecorder
from pyrofling.netsim.models import Impairment, ImpairmentConfig, LinkChange
from pyrofling.wire import RateDecider, RateFeedback

FPS = 60
DATAGRAM = 1048
CEILING = 10e6


@dataclass
class Run:
    """What happened, frame by frame: (send time, queueing delay of its first datagram) and the rates."""

    delays: list[tuple[float, float]] = field(default_factory=list)
    video_bps: list[tuple[float, float]] = field(default_factory=list)
    sent_bits: list[tuple[float, int]] = field(default_factory=list)

    def delay_p95(self, start: float, end: float) -> float:
        return float(np.percentile([d for t, d in self.delays if start <= t < end], 95))

    def sent_mbits(self, start: float, end: float) -> float:
        return sum(b for t, b in self.sent_bits if start <= t < end) / (end - start) / 1e6

    def video_at(self, t: float) -> float:
        return [v for at, v in self.video_bps if at <= t][-1]


def simulate(
    schedule: str | None,
    seconds: float,
    *,
    loss: float = 0.0,
    outages: tuple[float, float, float] | None = None,
    seed: int = 1,
) -> Run:
    rng = random.Random(seed)
    cfg = RateConfig(ceiling_bps=CEILING, floor_bps=1e6)
    link = LinkController(cfg)
    steps = LinkChange.parse_schedule(schedule) if schedule else ()
    net = Impairment(ImpairmentConfig(loss=loss, queue_s=0.05, schedule=steps, outages=outages), seed=seed)
    net.start(0.0)
    viewer = ArrivalRecorder()
    viewer.active = True
    viewer_clock = 1234.5  # the viewer's clock has nothing in common with the host's
    events: list[tuple[float, int, str, object]] = []  # (time, order, kind, payload)
    order = 0

    def at(t: float, kind: str, payload: object) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (t, order, kind, payload))

    run = Run()
    for i in range(int(seconds * FPS)):
        at(i / FPS, "frame", i & 0x3FFF)
    audio_every = 0.005
    for i in range(int(seconds / audio_every)):
        at(i * audio_every, "audio", None)
    last_report_lost = [0, 0]
    while events:
        now, _, kind, payload = heapq.heappop(events)
        if kind == "frame":
            seq = int(payload)  # type: ignore[call-overload]
            video = link.video_bps
            run.video_bps.append((now, video))
            size = max(200, int(video / FPS / 8 * rng.uniform(0.85, 1.15)))
            link.video_packet(size)
            n = -(-size // 1024)
            repair = max(1, n // 10)
            pace = link.pacing_bps(200e6)
            for d in range(n + repair):
                sent_at = now + d * DATAGRAM * 8 / pace
                link.sent(seq, sent_at, DATAGRAM)
                run.sent_bits.append((sent_at, DATAGRAM * 8))
                for arrival in net.process(sent_at, DATAGRAM):
                    at(arrival, "arrive", (seq, d == 0, sent_at))
                last_report_lost[1] += 1
        elif kind == "audio":
            link.count(220)
            run.sent_bits.append((now, 220 * 8))
            for arrival in net.process(now, 220):
                at(arrival, "arrive", None)
        elif kind == "arrive":
            viewer.datagram(DATAGRAM if payload else 220, now + viewer_clock)
            if payload is not None:
                seq, first, sent_at = cast(tuple[int, bool, float], payload)
                viewer.video(seq, now + viewer_clock)
                if first:
                    run.delays.append((sent_at, now - sent_at))
            report = viewer.poll(now + viewer_clock)
            if report is not None:
                at(now + 0.005, "feedback", report)
        elif kind == "feedback":
            assert isinstance(payload, RateFeedback)
            expected, lost = last_report_lost[1], net.stats.dropped - last_report_lost[0]
            last_report_lost[:] = [net.stats.dropped, 0]
            link.lost(min(lost, expected), expected)
            link.feedback(payload, now)
    return run


def test_a_narrowing_link_is_fitted_within_two_seconds_and_widening_is_followed_back() -> None:
    run = simulate("10 rate-mbits=4 queue-ms=50; 30 rate-mbits=0", 45.0)
    before = run.video_at(9.9)
    assert before == CEILING  # an open link: the ceiling
    # The link narrows at 10 s: within 2 s what is sent fits it, and the queue stays short from then on.
    assert run.sent_mbits(12.0, 30.0) < 4.0
    assert run.delay_p95(12.0, 30.0) < run.delay_p95(2.0, 10.0) + 0.020
    assert run.sent_mbits(12.0, 30.0) > 0.7 * 4.0  # and it uses most of it
    # At 30 s it widens again: back at the ceiling within 10 s.
    back = next(t for t, v in run.video_bps if t >= 30.0 and v >= 0.98 * CEILING)
    assert back - 30.0 < 10.0


def test_random_loss_without_a_queue_is_not_congestion() -> None:
    run = simulate(None, 20.0, loss=0.02)
    assert min(v for t, v in run.video_bps if t >= 2.0) >= 0.9 * CEILING


def test_outages_are_not_congestion() -> None:
    """Wi-Fi drops everything for a few tens of ms now and then: nothing queues, so nothing is cut."""
    run = simulate(None, 20.0, outages=(1.0, 0.02, 0.08))
    assert min(v for t, v in run.video_bps if t >= 2.0) >= 0.9 * CEILING


def test_a_drop_tail_queue_overflowing_is_congestion_even_before_the_delay_shows() -> None:
    """A queue of 5 ms: the standing queue never reaches the overuse delay, loss with a queue says it all."""
    run = simulate("5 rate-mbits=4 queue-ms=5", 15.0)
    assert run.sent_mbits(8.0, 15.0) < 4.0


def _voters(liar_bps: float, *, liar_plays: bool, honest_plays: bool) -> list[RateVoter]:
    return [
        RateVoter(1, CEILING, player=honest_plays, since_s=0.0),  # the first to join, on a good link
        RateVoter(2, liar_bps, player=liar_plays, since_s=5.0),  # says its link carries far less
        RateVoter(3, None, player=False, since_s=1.0),  # a native viewer: no say
    ]


def test_a_spectator_cannot_drag_the_shared_bitrate_down() -> None:
    shared = SharedBitrate(RateConfig(ceiling_bps=CEILING, floor_bps=1e6))
    assert not shared.decide(_voters(2e6, liar_plays=False, honest_plays=True))
    assert shared.bitrate_bps == CEILING
    # Nobody holds the pad: the first viewer to join decides, still not the newcomer.
    assert not shared.decide(_voters(2e6, liar_plays=False, honest_plays=False))
    assert shared.bitrate_bps == CEILING
    # The first viewer's link allows the ceiling; the newcomer's does not, and hears that another link decided.
    assert shared.told(1, CEILING) == RateDecider.CEILING
    assert shared.told(2, 2e6) == RateDecider.OTHER_VIEWER


def test_the_player_decides_and_lowest_lets_everyone_decide() -> None:
    shared = SharedBitrate(RateConfig(ceiling_bps=CEILING, floor_bps=1e6))
    assert shared.decide(_voters(3e6, liar_plays=True, honest_plays=False))
    assert shared.bitrate_bps == 3e6
    assert shared.told(2) == RateDecider.YOUR_LINK and shared.told(1) == RateDecider.OTHER_VIEWER
    lowest = SharedBitrate(RateConfig(ceiling_bps=CEILING, floor_bps=1e6), "lowest")
    assert lowest.decide(_voters(0.2e6, liar_plays=False, honest_plays=True))
    assert lowest.bitrate_bps == 1e6 and lowest.told(2) == RateDecider.FLOOR  # never below the floor
    fixed = SharedBitrate(RateConfig(ceiling_bps=CEILING, floor_bps=1e6), "fixed")
    assert not fixed.decide(_voters(1e6, liar_plays=True, honest_plays=True))
    assert fixed.bitrate_bps == CEILING and fixed.told(1) == RateDecider.FIXED
    with pytest.raises(ValueError, match="unknown rate policy"):
        SharedBitrate(RateConfig(ceiling_bps=CEILING, floor_bps=1e6), "loudest")


def test_the_viewer_says_in_words_what_set_the_bitrate() -> None:
    from pyrofling.core.viewer.rate_feedback import describe_rate, narrower_than_stream
    from pyrofling.wire import StreamRate

    mine = StreamRate(3500, 10_000, 3600, RateDecider.YOUR_LINK)
    assert describe_rate(mine) == "stream 3.50 Mbit/s (fitted to your link), your link carries about 3.60"
    assert not narrower_than_stream(mine, received_kbits=3500)
    squeezed = StreamRate(8000, 10_000, 2000, RateDecider.OTHER_VIEWER)
    assert "another viewer's link" in describe_rate(squeezed) and narrower_than_stream(squeezed, 1900)
    # A small picture that sends 300 kbit/s of its 8 Mbit/s is not squeezed by a 2 Mbit/s estimate.
    assert not narrower_than_stream(squeezed, 300)


def test_the_narrow_link_warning_waits_for_a_squeeze_that_lasts_and_says_it_once() -> None:
    from pyrofling.core.viewer.rate_feedback import NarrowLinkWarning
    from pyrofling.wire import StreamRate

    squeezed = StreamRate(8000, 10_000, 2000, RateDecider.OTHER_VIEWER)
    grown_back = StreamRate(8000, 10_000, 9000, RateDecider.OTHER_VIEWER)
    warning = NarrowLinkWarning(hold_s=3.0)
    # A blip: squeezed for two seconds (a busy machine), then the estimate grows back. No warning.
    said = [warning.update(r, 1900, t) for t, r in enumerate([squeezed, squeezed, squeezed, grown_back])]
    assert said == [None] * 4
    # A link that stays narrow: said once, after three seconds of it, then not again while it lasts.
    said = [warning.update(squeezed, 1900, 10.0 + t) for t in range(8)]
    assert [t for t, line in enumerate(said) if line is not None] == [3]
    assert said[3] is not None and "your link carries about 2.00" in said[3] and "break up" in said[3]
    # It passes (the viewer left, so no rate), then comes back: a new spell, a new warning.
    assert warning.update(None, 0, 20.0) is None
    said = [warning.update(squeezed, 1900, 30.0 + t) for t in range(5)]
    assert [t for t, line in enumerate(said) if line is not None] == [3]


@pytest.mark.io
def test_arrival_times_are_the_kernels_not_when_the_loop_got_to_the_datagram() -> None:
    """A viewer busy for 50 ms reads a datagram late; its arrival time must still be when it arrived."""
    import socket
    import time

    from pyrofling.client.arrival_clock import ArrivalClock

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        rx.bind(("127.0.0.1", 0))
        clock = ArrivalClock(rx)
        stamps = []
        for _ in range(4):  # the first few may predate stamping
            sent = time.monotonic()
            tx.sendto(b"x", rx.getsockname())
            time.sleep(0.05)
            reading = time.monotonic()
            rx.recv(16)
            stamps.append((sent, clock.now(), reading))
    assert clock.kernel
    sent, stamp, reading = stamps[-1]
    # Stamped when it arrived, after it was sent and before the loop went to read it (50 ms later): a read time
    # would come after ``reading``. (The wall-to-monotonic mapping may be off by a few microseconds.)
    assert sent - 0.001 <= stamp < reading


class _RecordingConnection:
    """Stands in for the pure ViewerConnection: records what the shell hands it, and in what order."""

    def __init__(self, *, timer_after_datagram_s: float | None = None) -> None:
        self.events: list[tuple[str, float]] = []
        self.due: float | None = None
        self.timer_after_datagram_s = timer_after_datagram_s  # each datagram asks for a timer this long after it
        self.timers_asked = 0

    def datagram_received(self, data: bytes, now: float) -> list[object]:
        self.events.append(("datagram", now))
        if self.timer_after_datagram_s is not None:
            self.due = now + self.timer_after_datagram_s
        return []

    def handle_timer(self, now: float) -> list[object]:
        self.events.append(("timer", now))
        self.due = None
        return []

    def control_bytes(self, data: bytes, now: float) -> list[object]:
        return []

    def next_timer(self) -> float | None:
        self.timers_asked += 1
        return self.due


@pytest.mark.io
def test_a_busy_viewer_reads_every_datagram_waiting_before_its_timer_judges_them() -> None:
    """A frame's datagrams sit unread while the viewer is busy past a timer (the loss tracker's tail wait):
    the shell must hand them all over before the time, or the core would count them lost and ask again."""
    import asyncio
    import socket
    import time

    from pyrofling.client.connection import ConnectionIO
    from pyrofling.core.viewer.connection import DatagramToHost

    async def scenario() -> list[tuple[str, float]]:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as host_udp:
            host_udp.bind(("127.0.0.1", port))
            core = _RecordingConnection()
            io = ConnectionIO(core, lambda out: None)  # type: ignore[arg-type]
            assert await asyncio.wait_for(io.open("127.0.0.1", port, 5.0), 5.0) is None
            host_udp.settimeout(5.0)
            core.due = time.monotonic() + 0.003
            io.perform([DatagramToHost(b"hello")])  # the timer is armed for 3 ms from now
            _, viewer = host_udp.recvfrom(64)
            for _ in range(40):
                host_udp.sendto(b"x" * 1200, viewer)
            time.sleep(0.02)  # busy (a decode, a statistics write): the timer is overdue when the loop runs
            for _ in range(100):
                await asyncio.sleep(0.005)
                if len(core.events) > 40:
                    break
            stop = asyncio.Event()
            stop.set()
            await io.ended(stop)  # closes the sockets
        server.close()
        return core.events

    events = asyncio.run(asyncio.wait_for(scenario(), 10.0))
    kinds = [e for e, _ in events]
    assert kinds.count("datagram") == 40 and "timer" in kinds
    assert kinds.index("timer") == 40, kinds  # every datagram first, then the time
    timer_s = events[40][1]
    assert all(now <= timer_s for _, now in events[:40])


@pytest.mark.io
def test_the_timer_is_armed_once_for_the_datagrams_of_a_wake_up_and_still_fires() -> None:
    """A frame's datagrams read in one wake-up: the core's next deadline is asked for once after them, not after
    each (no timer can fire while they are read), and the deadline the last of them asked for still comes."""
    import asyncio
    import socket

    from pyrofling.client.connection import ConnectionIO
    from pyrofling.core.viewer.connection import DatagramToHost

    async def scenario() -> tuple[_RecordingConnection, int]:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as host_udp:
            host_udp.bind(("127.0.0.1", port))
            core = _RecordingConnection(timer_after_datagram_s=0.01)
            io = ConnectionIO(core, lambda out: None)  # type: ignore[arg-type]
            assert await asyncio.wait_for(io.open("127.0.0.1", port, 5.0), 5.0) is None
            host_udp.settimeout(5.0)
            io.perform([DatagramToHost(b"hello")])
            _, viewer = host_udp.recvfrom(64)
            asked_before = core.timers_asked
            for _ in range(40):  # sent before the loop runs again: all 40 wait in the socket for one wake-up
                host_udp.sendto(b"x" * 1200, viewer)
            for _ in range(200):
                await asyncio.sleep(0.005)
                if "timer" in [e for e, _ in core.events]:
                    break
            stop = asyncio.Event()
            stop.set()
            await io.ended(stop)
        server.close()
        return core, asked_before

    core, asked_before = asyncio.run(asyncio.wait_for(scenario(), 10.0))
    kinds = [e for e, _ in core.events]
    assert kinds.count("datagram") == 40 and kinds.index("timer") == 40
    # Asked after the wake-up's datagrams (and once after the timer itself), not forty times.
    assert core.timers_asked - asked_before <= 8, core.timers_asked - asked_before
    last_datagram_s, timer_s = core.events[39][1], core.events[40][1]
    assert timer_s >= last_datagram_s + 0.01 - 1e-3  # the deadline the last datagram asked for
