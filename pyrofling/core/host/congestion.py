"""Fitting the stream to the link: what each viewer's link carries, and the one encode's bitrate (protocol.md §7.10).

Pure: times are passed in.  Per viewer, a :class:`LinkController` learns from
two sides.  The host's paced queue tells it when each video packet's first and
last datagram left (:meth:`LinkController.sent`); the viewer's RATE_FEEDBACK
says when they arrived (:meth:`LinkController.feedback`).  From those:

* **queueing delay** — a frame's first datagram's one-way delay less the least
  seen in the last 10 s (the clocks' offset cancels).  The first datagram waits
  only behind what earlier frames left in the bottleneck's queue, so it reads
  the *standing* queue, not the frame's own serialisation.  This is the early
  signal: it grows before anything is lost.
* **delivered rate** — what the viewer received per second.  While a queue
  stands the link is busy, so this is its capacity.
* **train rate** — a frame leaves the host back to back; how fast its
  datagrams arrived is what the link carries at most.  A guide for growing
  back, and the most it grows to, never a reason to slow down (a busy viewer
  stretches it).

The controller keeps ``allowed_bps`` (all bytes to that viewer: video, repair,
audio, resends).  A standing queue above ``overuse_delay_s`` (two reports in a
row, or twice it once; at least 3 datagram times on a slow link) cuts it to
90 % of the delivered rate, less when the queue is deep so that it drains; then
it holds a while.  While the queue is clear it grows: gently (2 %/s) past the
capacity it measured — every step past the link is queueing delay — and 8 %/s
beyond; fast (30 %/s) when the trains show the link got better; never past 95 %
of what the trains show.  Loss alone — no queue — is not congestion (FEC and resends
handle it) and never slows it (a deep drop-tail queue overflowing shows its
delay first); heavy loss for half a second while the link delivers a steady
share of what is sent is a queue too shallow to show delay, and does, unlike an
outage (nothing arrives) or random loss (nearly everything does).

:class:`SharedBitrate` turns the viewers' allowances into the one encoder's
bitrate by a policy: ``player`` (default: the viewer playing — whose states
drive the virtual pad — decides, else the longest-connected reporting viewer), ``lowest`` (everyone's
link counts) or ``fixed`` (the configured bitrate, as the reference).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from pyrofling.wire import RateDecider, RateFeedback

#: A key frame's datagrams cost the pacer this many times their size: twice the link's rate / 1.75, just over
#: the link (an IDR is up to the VBV's ceiling-sized peak; in the network's queue it would read as congestion).
KEY_FRAME_PACING = 1.75
#: Policies for the shared bitrate.
RATE_POLICIES = ("player", "lowest", "fixed")

_U32 = 1 << 32


@dataclass(frozen=True, slots=True)
class RateConfig:
    """The bounds and the controller's constants (seconds, bit/s)."""

    ceiling_bps: float
    floor_bps: float
    #: A standing queue this deep (two reports running, or twice it once) is overuse.
    overuse_delay_s: float = 0.006
    #: Below this the queue is clear and the rate may grow.
    clear_delay_s: float = 0.003
    #: A cut leaves this share of the delivered rate (less when the queue is deep: it must drain).
    decrease_factor: float = 0.9
    #: How long to leave a cut to act (the queue drains, the encoder follows) before judging again.
    hold_s: float = 0.3
    #: Growth per second: back toward a capacity it has measured (or a link its trains show), near that
    #: capacity (probing gently: every step past it is queueing delay), and beyond it.
    fast_growth_per_s: float = 0.30
    near_growth_per_s: float = 0.02
    probe_growth_per_s: float = 0.08
    #: Datagram loss over the last three LOSS_REPORTs that, held for half a second while the link delivers a
    #: steady share of what is sent, means a drop-tail queue too shallow to show delay overflowed.
    overflow_loss: float = 0.10
    #: The one-way delay's floor is the least seen this long.
    base_window_s: float = 10.0


@dataclass(slots=True)
class _Sent:
    first_s: float
    last_s: float
    bytes: int
    datagrams: int


class _WindowMin:
    """Least value over a sliding time window (monotonic deque)."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._items: deque[tuple[float, float]] = deque()

    def add(self, now: float, value: float) -> float:
        items = self._items
        while items and items[-1][1] >= value:
            items.pop()
        items.append((now, value))
        while items[0][0] < now - self.window_s:
            items.popleft()
        return items[0][1]


@dataclass(slots=True)
class LinkState:
    """What a controller knows, for statistics and the HUD."""

    allowed_bps: float
    video_bps: float
    queue_delay_ms: float | None
    delivered_bps: float | None
    capacity_bps: float | None
    train_bps: float | None
    congested: bool
    cuts: int


class LinkController:
    """One viewer's link (see the module docstring)."""

    def __init__(self, config: RateConfig, *, overhead: float = 1.25) -> None:
        self.config = config
        #: Video bytes on the wire (headers, repair) over the encoder's bytes, as last measured.
        self.overhead = overhead
        #: What else goes to the viewer (audio and its repair, resends), bit/s, as last measured.
        self.other_bps = 0.0
        #: What actually went to the viewer lately, bit/s, and the factor that makes the encoder's target land
        #: the whole stream on ``allowed_bps`` (x264 misses its target by a few percent, repair comes and goes).
        self.sent_bps: float | None = None
        self.correction = 1.0
        #: What the link lets this viewer's stream use; infinite while the link has never been the limit (until
        #: the first cut, and again once grown back past what the ceiling needs).
        self.allowed_bps = math.inf
        #: The link's capacity as measured at the last cut; None until one (or once grown well past it).
        self.capacity_bps: float | None = None
        self.queue_delay_s: float | None = None
        self.cuts = 0
        self.feedbacks = 0
        self._sent: dict[int, _Sent] = {}
        self._sent_order: deque[int] = deque()
        self._base = _WindowMin(config.base_window_s)
        self._viewer_us: int | None = None  # the viewer's clock, unwrapped, at its last sample
        self._delivered: deque[tuple[float, int, int]] = deque()  # (now, bytes, interval µs)
        self._trains: deque[tuple[float, float]] = deque()  # (now, bit/s)
        self._over = 0
        self._hold_until = -math.inf
        self._queue_seen_s = -math.inf
        self._throttled_run = 0
        #: A LOSS_REPORT's (lost, expected) waiting for the next feedback to say whether a queue caused it.
        self.pending_loss: tuple[int, int] | None = None
        self._updated_s: float | None = None
        self._bytes_wire = 0  # video datagrams sent (data and repair)
        self._bytes_video = 0  # the encoder's bytes queued
        self._bytes_other = 0  # audio, its repair, resends
        self._overhead_window: deque[tuple[float, int, int, int]] = deque()
        self._losses: deque[tuple[int, int]] = deque(maxlen=3)
        #: Recent decisions (time, what, queue ms, delivered kbit/s, allowed kbit/s), for statistics.
        self.events: deque[tuple[float, str, float, int, int]] = deque(maxlen=64)

    # -- what the host sent ------------------------------------------------------------------

    def sent(self, seq: int, now: float, size: int) -> None:
        """A datagram of video packet ``seq`` (data or repair) left at ``now``, ``size`` bytes on the wire."""
        record = self._sent.get(seq)
        if record is None:
            record = self._sent[seq] = _Sent(now, now, 0, 0)
            self._sent_order.append(seq)
            if len(self._sent_order) > 512:
                self._sent.pop(self._sent_order.popleft(), None)
        record.last_s = now
        record.bytes += size
        record.datagrams += 1
        self._bytes_wire += size

    def count(self, size: int) -> None:
        """Any other datagram sent to the viewer (audio and its repair, resends): it shares the link."""
        self._bytes_other += size

    def video_packet(self, payload_bytes: int) -> None:
        """An encoded video packet of ``payload_bytes`` went into this viewer's queue."""
        self._bytes_video += payload_bytes

    # -- what the viewer saw -----------------------------------------------------------------

    def feedback(self, msg: RateFeedback, now: float) -> None:
        cfg = self.config
        self.feedbacks += 1
        self._measure_overhead(now)
        queue_s = self._queue_delay(msg, now)
        self.queue_delay_s = queue_s
        self._delivered.append((now, msg.bytes_received, msg.interval_us))
        while self._delivered and self._delivered[0][0] < now - 0.15:
            self._delivered.popleft()
        dt = 0.0 if self._updated_s is None else min(0.5, now - self._updated_s)
        self._updated_s = now
        if queue_s is None:
            return
        clear_s, overuse_s = self._thresholds()
        if queue_s > clear_s:
            self._queue_seen_s = now
        heavy = self.recent_loss >= cfg.overflow_loss
        self._throttled_run = self._throttled_run + 1 if heavy and self._throttled() else 0
        # A queue too shallow to show delay, overflowing, delivers a steady share of what is sent for as long as
        # it lasts; a short outage looks so for a report or two, bursts of random loss hardly ever.
        overflow = heavy and self._throttled_run >= 10
        if queue_s > overuse_s or overflow:
            self._over += 1
        else:
            self._over = 0
        overused = overflow or queue_s > 2 * overuse_s or self._over >= 2
        if now < self._hold_until:
            return
        if overused:
            self._cut(queue_s, now, "cut on loss" if overflow else "cut")
        elif queue_s < clear_s:
            self._grow(dt)

    def _thresholds(self) -> tuple[float, float]:
        """The queue delays that count as clear and as overuse.  On a slow link one datagram takes a while to
        cross (10 ms at 0.8 Mbit/s), and a frame's first datagram may wait behind the last one's tail: the
        thresholds are at least 1.5 and 3 datagram times."""
        cfg = self.config
        rate = self.capacity_bps or self.delivered_bps
        datagram_s = 1076 * 8 / rate if rate else 0.0
        return max(cfg.clear_delay_s, 1.5 * datagram_s), max(cfg.overuse_delay_s, 3 * datagram_s)

    @property
    def recent_loss(self) -> float:
        """Datagram loss over the last few LOSS_REPORTs (one report at a low rate holds only a few datagrams)."""
        lost = sum(x for x, _ in self._losses)
        expected = sum(n for _, n in self._losses)
        return lost / expected if expected else 0.0

    def _throttled(self) -> bool:
        """The link delivers a steady share of what is sent, well short of all of it: a shallow queue
        overflowing (an outage delivers next to nothing, random loss nearly everything)."""
        delivered, sent = self.delivered_bps, self.sent_bps
        return delivered is not None and sent is not None and sent > 0 and 0.1 < delivered / sent < 0.9

    def lost(self, lost: int, expected: int) -> None:
        """A LOSS_REPORT's datagram loss (first transmissions)."""
        if expected:
            self._losses.append((lost, expected))

    def queue_loss(self, now: float) -> bool:
        """Whether loss now is the queue's doing (a queue stood in the last second, or a cut was made): repair
        does not help a link that is full, it only adds to it, so the FEC planner should not learn from it."""
        return now - self._queue_seen_s < 1.0 or now < self._hold_until + 0.7

    def _queue_delay(self, msg: RateFeedback, now: float) -> float | None:
        """The least standing queue among the report's frames (one late-read frame does not make a queue)."""
        queue: float | None = None
        for sample in msg.samples:
            sent = self._sent.get(sample.packet_seq)
            if sent is None:
                continue
            first_us = self._unwrap(sample.first_arrival_us)
            last_us = self._unwrap(sample.last_arrival_us)
            owd = first_us / 1e6 - sent.first_s
            q = owd - self._base.add(now, owd)
            queue = q if queue is None else min(queue, q)
            spread_s = (last_us - first_us) / 1e6
            if sent.datagrams >= 4 and sample.datagrams >= sent.datagrams and spread_s > 0.0005:
                per = sent.bytes / sent.datagrams
                self._trains.append((now, per * (sent.datagrams - 1) * 8 / spread_s))
        while self._trains and self._trains[0][0] < now - 2.0:
            self._trains.popleft()
        return queue

    def _unwrap(self, us: int) -> int:
        if self._viewer_us is None:
            self._viewer_us = us
            return us
        delta = (us - self._viewer_us) % _U32
        if delta >= _U32 // 2:
            delta -= _U32
        value = self._viewer_us + delta
        self._viewer_us = max(self._viewer_us, value)
        return value

    def _measure_overhead(self, now: float) -> None:
        """The video's own overhead is a factor (repair follows its size); the rest is a rate of its own (audio
        does not shrink with the video)."""
        window = self._overhead_window
        window.append((now, self._bytes_wire, self._bytes_video, self._bytes_other))
        while len(window) > 2 and window[0][0] < now - 2.0:
            window.popleft()
        t0, wire0, video0, other0 = window[0]
        video = self._bytes_video - video0
        if video > 50_000:
            self.overhead = max(1.0, min(4.0, (self._bytes_wire - wire0) / video))
        if now - t0 >= 0.5:
            self.other_bps = (self._bytes_other - other0) * 8 / (now - t0)
            self.sent_bps = (self._bytes_wire - wire0 + self._bytes_other - other0) * 8 / (now - t0)
            if self.congested:
                # Steer the encoder down when what is sent overshoots what is allowed (x264 misses its target
                # by a few percent, repair comes and goes); never up: probing is the controller's business.
                error = self.allowed_bps / max(self.sent_bps, 1.0)
                self.correction = max(0.6, min(1.0, self.correction * max(0.97, min(1.02, error))))
            else:
                self.correction += 0.05 * (1.0 - self.correction)

    @property
    def delivered_bps(self) -> float | None:
        interval_us = sum(i for _, _, i in self._delivered)
        if interval_us < 50_000:
            return None
        return sum(b for _, b, _ in self._delivered) * 8 / (interval_us / 1e6)

    @property
    def train_bps(self) -> float | None:
        if len(self._trains) < 8:
            return None
        rates = sorted(r for _, r in self._trains)
        return rates[len(rates) // 2]

    def _cut(self, queue_s: float, now: float, why: str) -> None:
        cfg = self.config
        delivered = self.delivered_bps
        if delivered is None:
            return
        # The queue must drain too: the deeper it is, the further below the link the stream goes for a while.
        factor = max(0.5, min(cfg.decrease_factor, 1.0 - queue_s / 0.25))
        self.capacity_bps = delivered
        self.allowed_bps = max(self._min_allowed, min(self.allowed_bps, factor * delivered))
        self.cuts += 1
        self._over = 0
        self._hold_until = now + cfg.hold_s
        self.events.append(
            (round(now, 3), why, round(queue_s * 1000, 1), round(delivered / 1000), round(self.allowed_bps / 1000))
        )

    def _grow(self, dt: float) -> None:
        cfg = self.config
        capacity, train = self.capacity_bps, self.train_bps
        # A frame leaves back to back, so its train shows what the link carries now: well above the capacity
        # measured at the last cut, the link got better and the stream may return to it quickly.
        better = train is not None and (capacity is None or train > 1.3 * capacity)
        if better and train is not None and self.allowed_bps < 0.85 * train:
            rate, limit = cfg.fast_growth_per_s, 0.85 * train
        elif capacity is not None and self.allowed_bps < 1.1 * capacity:
            rate, limit = cfg.near_growth_per_s, math.inf  # gently past what was measured: that is the probe
        else:
            rate, limit = cfg.probe_growth_per_s, math.inf
        if train is not None:
            # Not up to what the trains show the link carries: the last 5 % is where frames of uneven size
            # queue, and probing beyond it only builds a queue (a better link shows in the trains first, and
            # lifts this with them).
            limit = min(limit, max(self.allowed_bps, 0.95 * train))
        if math.isinf(self.allowed_bps):
            return  # the link has not been the limit
        grown = min(limit, self.allowed_bps * (1.0 + rate * dt))
        self.allowed_bps = max(self.allowed_bps, grown)
        if self.allowed_bps >= self._max_allowed:
            self.allowed_bps = math.inf  # room for the ceiling and more: the link is not the limit any more
        if capacity is not None and self.allowed_bps > 1.1 * capacity:
            self.capacity_bps = None  # grown well past it without a queue: the link is better now

    @property
    def _max_allowed(self) -> float:
        return self.config.ceiling_bps * self.overhead * 1.2 + self.other_bps

    @property
    def _min_allowed(self) -> float:
        return self.config.floor_bps * self.overhead + self.other_bps

    # -- what follows ------------------------------------------------------------------------

    @property
    def _video_share_bps(self) -> float:
        return (self.allowed_bps - self.other_bps) / self.overhead * self.correction

    @property
    def link_video_bps(self) -> float:
        """What this link carries for the video, unbounded by the ceiling and floor (for telling the viewer)."""
        return max(0.0, self._video_share_bps)

    @property
    def video_bps(self) -> float:
        """What this link allows the video encode (the rest goes to repair, headers and audio)."""
        cfg = self.config
        return max(cfg.floor_bps, min(cfg.ceiling_bps, self._video_share_bps))

    @property
    def congested(self) -> bool:
        """The link, not the ceiling, limits this viewer's stream now."""
        return self._video_share_bps < self.config.ceiling_bps

    def pacing_bps(self, configured_bps: float) -> float:
        """The pacer's rate: twice the link when it is known, else what was configured.  An ordinary frame
        leaves back to back, so its train keeps showing what the link carries (up to twice what was measured:
        a better link shows); a key frame is paced at just over the link (:data:`KEY_FRAME_PACING`), so it waits
        in the host's queue, which the queue estimate does not see, rather than in the network's."""
        known = self.capacity_bps
        rate = 2.0 * max(known, self.allowed_bps) if known is not None else configured_bps
        return min(configured_bps, rate)

    def state(self) -> LinkState:
        q = self.queue_delay_s
        return LinkState(
            allowed_bps=self.allowed_bps,
            video_bps=self.video_bps,
            queue_delay_ms=q * 1000 if q is not None else None,
            delivered_bps=self.delivered_bps,
            capacity_bps=self.capacity_bps,
            train_bps=self.train_bps,
            congested=self.congested,
            cuts=self.cuts,
        )


@dataclass(frozen=True, slots=True)
class RateVoter:
    """A viewer as the shared bitrate sees it."""

    conn_id: int
    video_bps: float | None  # None: it sends no feedback (a native viewer): it has no say
    player: bool  # its pad states drive the virtual pad
    since_s: float  # when it started streaming


@dataclass(slots=True)
class SharedBitrate:
    """The one encoder's bitrate from the viewers' links, by ``policy`` (see the module docstring)."""

    config: RateConfig
    policy: str = "player"
    bitrate_bps: float = field(init=False)
    #: The viewers whose links set it last (empty: the ceiling or the policy did).
    deciders: tuple[int, ...] = field(default=())
    reason: RateDecider = RateDecider.CEILING
    changes: int = 0

    def __post_init__(self) -> None:
        if self.policy not in RATE_POLICIES:
            raise ValueError(f"unknown rate policy {self.policy!r}; choose {', '.join(RATE_POLICIES)}")
        self.bitrate_bps = self.config.ceiling_bps
        if self.policy == "fixed":
            self.reason = RateDecider.FIXED

    def decide(self, voters: Iterable[RateVoter]) -> bool:
        """Recompute; True when the bitrate changed by at least 2 % (worth reconfiguring the encoder)."""
        cfg = self.config
        if self.policy == "fixed":
            return False
        reporting = [v for v in voters if v.video_bps is not None]
        if self.policy == "player":
            chosen = [v for v in reporting if v.player] or sorted(reporting, key=lambda v: v.since_s)[:1]
        else:
            chosen = reporting
        deciders: tuple[int, ...] = ()
        if not chosen:
            target, reason = cfg.ceiling_bps, RateDecider.CEILING
        else:
            narrowest = min(chosen, key=lambda v: v.video_bps or 0.0)
            link = narrowest.video_bps or 0.0
            target = max(cfg.floor_bps, min(cfg.ceiling_bps, link))
            deciders = (narrowest.conn_id,)
            if link >= cfg.ceiling_bps:
                reason = RateDecider.CEILING
            elif link <= cfg.floor_bps:
                reason = RateDecider.FLOOR
            else:
                reason = RateDecider.YOUR_LINK
        self.deciders, self.reason = deciders, reason
        if abs(target - self.bitrate_bps) < 0.02 * self.bitrate_bps and not (
            target in (cfg.ceiling_bps, cfg.floor_bps) and target != self.bitrate_bps
        ):
            return False
        self.bitrate_bps = target
        self.changes += 1
        return True

    def told(self, conn_id: int, link_bps: float | None = None) -> RateDecider:
        """What decided the bitrate, as viewer ``conn_id`` (whose link carries ``link_bps``) should hear it: a
        viewer that had no say and whose link is narrower than the stream hears that another viewer's link set
        it, whatever set that one's."""
        if self.reason == RateDecider.FIXED or conn_id in self.deciders:
            return self.reason
        if self.reason == RateDecider.YOUR_LINK:
            return RateDecider.OTHER_VIEWER
        if link_bps is not None and self.deciders and link_bps < 0.9 * self.bitrate_bps:
            return RateDecider.OTHER_VIEWER
        return self.reason
