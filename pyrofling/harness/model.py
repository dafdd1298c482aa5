"""What a harness run is asked (:class:`Link`, :class:`Stream`) and what it answers (:class:`StreamResult`).

Pure: plain values, their checks, and the reading of a run's raw statistics into one typed result
(:func:`result_from`). Nothing here starts a process or reads a clock.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pyrofling.netsim.models import LinkChange

#: The bursts ``bench stream --ge`` uses: P(good→bad) 1 %, P(bad→good) 15 %, 80 % lost while bad (about 5 % lost).
DEFAULT_BURSTS = (0.01, 0.15, 0.8)
FEC_POLICIES = ("auto", "reference", "tuned", "adaptive", "none")
RECOVERIES = ("key-frame", "intra-refresh")


def _probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name}={value!r} is not a probability (0 to 1; 2 % is 0.02)")


def _not_negative(name: str, value: float) -> None:
    if not value >= 0 or math.isinf(value):
        raise ValueError(f"{name}={value!r} must be a finite number >= 0")


@dataclass(frozen=True, slots=True)
class Link:
    """The network between the host and the viewer, as ``pyrofling netsim`` makes it. Losses apply to the media
    (host → viewer); a delay applies in each direction. Every random choice follows ``seed``: one seed, the same
    datagrams dropped (by their order on the link)."""

    #: Each datagram lost independently with this probability (0.02: 2 %).
    loss: float = 0.0
    #: Gilbert–Elliott bursts instead: P(good→bad), P(bad→good), loss while bad (:meth:`gilbert_elliott`).
    bursts: tuple[float, float, float] | None = None
    #: Added one-way, in each direction: the round trip grows by twice this.
    delay_ms: float = 0.0
    #: Extra uniform delay, 0 to this, per datagram host → viewer.
    jitter_ms: float = 0.0
    #: Gaussian variation of the host → viewer delay, σ.
    delay_sigma_ms: float = 0.0
    #: Outages host → viewer (everything dropped): mean seconds between them, shortest and longest, seconds.
    outages: tuple[float, float, float] | None = None
    #: A bottleneck host → viewer, Mbit/s (0: none), and its queue as time (None: netsim's default in bytes).
    rate_mbits: float = 0.0
    queue_ms: float | None = None
    #: How the link changes over time, in ``netsim --schedule`` form: ``"5 rate-mbits=4; 10 loss=2%"``.
    schedule: str | None = None
    seed: int = 1

    def __post_init__(self) -> None:
        _probability("loss", self.loss)
        if self.bursts is not None:
            if len(self.bursts) != 3:
                raise ValueError("bursts=(p_good_bad, p_bad_good, loss_bad): three probabilities")
            for name, value in zip(("p_good_bad", "p_bad_good", "loss_bad"), self.bursts, strict=True):
                _probability(name, value)
            if self.loss:
                raise ValueError("give loss (independent) or bursts (Gilbert–Elliott), not both")
        for name in ("delay_ms", "jitter_ms", "delay_sigma_ms", "rate_mbits"):
            _not_negative(name, getattr(self, name))
        if self.queue_ms is not None:
            _not_negative("queue_ms", self.queue_ms)
        if self.outages is not None:
            mean_s, shortest_s, longest_s = self.outages
            if not (mean_s > 0 and 0 <= shortest_s <= longest_s):
                raise ValueError("outages=(mean seconds between, shortest s, longest s), with shortest <= longest")
        if self.schedule is not None:
            LinkChange.parse_schedule(self.schedule)  # ValueError naming the step that is wrong

    @classmethod
    def iid(cls, loss: float, *, seed: int = 1) -> Link:
        """Each datagram lost with probability ``loss``, independently."""
        return cls(loss=loss, seed=seed)

    @classmethod
    def gilbert_elliott(
        cls, p_good_bad: float = 0.01, p_bad_good: float = 0.15, loss_bad: float = 0.8, *, seed: int = 1
    ) -> Link:
        """Losses in bursts (default: ``bench stream --ge``'s, about 5 % in bursts of about 7)."""
        return cls(bursts=(p_good_bad, p_bad_good, loss_bad), seed=seed)

    @property
    def mean_loss(self) -> float:
        """The long-run share of datagrams lost to the loss model (not counting outages or a full queue)."""
        if self.bursts is None:
            return self.loss
        good_bad, bad_good, loss_bad = self.bursts
        return loss_bad * good_bad / (good_bad + bad_good) if good_bad + bad_good else 0.0

    @property
    def impaired(self) -> bool:
        """Whether anything stands between host and viewer (else they talk directly, as ``bench stream`` does)."""
        return self != Link(seed=self.seed)

    def label(self) -> str:
        parts = []
        if self.bursts is not None:
            parts.append(f"bursts {self.mean_loss:.1%}")
        elif self.loss:
            parts.append(f"iid {self.loss:.1%}")
        for name, unit in (("delay_ms", "ms each way"), ("jitter_ms", "ms jitter"), ("delay_sigma_ms", "ms σ")):
            if getattr(self, name):
                parts.append(f"{getattr(self, name):g} {unit}")
        if self.outages is not None:
            parts.append(f"outages every {self.outages[0]:g} s")
        if self.rate_mbits:
            parts.append(f"{self.rate_mbits:g} Mbit/s")
        if self.schedule:
            parts.append(f"schedule {self.schedule!r}")
        return f"{', '.join(parts) or 'loopback'}, seed {self.seed}"


@dataclass(frozen=True, slots=True)
class Stream:
    """What the host streams and how the viewer recovers: the host's and viewer's options, typed."""

    width: int = 1280
    height: int = 720
    fps: int = 60
    #: How long the viewer watches.
    seconds: float = 10.0
    bitrate_kbits: int = 10_000
    #: The host's FEC plan (``--fec-planner``): auto, reference, tuned, adaptive, or none (no repair at all).
    fec: str = "auto"
    #: The viewer's recovery after a loss nothing repaired: key-frame (asks for one) or intra-refresh.
    recovery: str = "key-frame"
    #: Whether the viewer asks for resends (NACK) of what FEC did not repair.
    resends: bool = True
    #: The host's intra-refresh period, seconds (None: the host's default).
    refresh_s: float | None = None
    encoder: str = "libx264"
    preset: str = "ultrafast"
    #: Further ``pyrofling host`` and ``pyrofling view`` options, as on the command line.
    host_args: tuple[str, ...] = ()
    view_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Smaller pictures stream, but the viewer cannot judge them: its frame marker is unreadable at 128x72
        # (every refresh "corrupt") and absent at 64x64.
        if self.width < 160 or self.height < 120 or self.width % 2 or self.height % 4:
            raise ValueError(f"{self.width}x{self.height}: the judged test scene needs an even width, a height "
                             "divisible by 4, and at least 160x120")  # fmt: skip
        if not 1 <= self.fps <= 240:
            raise ValueError(f"fps={self.fps!r}: 1 to 240")
        if not self.seconds > 0:
            raise ValueError(f"seconds={self.seconds!r} must be > 0")
        if self.fec not in FEC_POLICIES:
            raise ValueError(f"fec={self.fec!r}: one of {', '.join(FEC_POLICIES)}")
        if self.recovery not in RECOVERIES:
            raise ValueError(f"recovery={self.recovery!r}: one of {', '.join(RECOVERIES)}")
        if self.bitrate_kbits <= 0:
            raise ValueError(f"bitrate_kbits={self.bitrate_kbits!r} must be > 0")
        for name in ("host_args", "view_args"):
            if isinstance(getattr(self, name), str):
                raise ValueError(f"{name} is a tuple of arguments, e.g. ('--refresh-s', '0.5'), not one string")

    def label(self) -> str:
        return f"{self.height}p{self.fps} {self.bitrate_kbits / 1000:g} Mbit/s for {self.seconds:g} s, FEC {self.fec}"


class Latency(NamedTuple):
    """Capture → decoded on the viewer, milliseconds (read from the pictures' stamps); None without pictures."""

    p50: float | None
    p95: float | None
    p99: float | None


class Second(NamedTuple):
    """One second of the stream as the viewer saw it."""

    t_s: float  # seconds since the viewer's first second ended
    received_mbits: float
    stream_kbits: int | None  # the encoder's rate then, as the host said (it follows the link)
    good_pct: float | None  # good refreshes in that second


@dataclass(frozen=True, slots=True)
class StreamResult:
    """What the player saw, and what the link and the host did about it. Refreshes are judged one by one against
    the test scene: good (a clean picture at most 2 frames old), stale (an older one) or corrupt."""

    stream: Stream
    link: Link
    refreshes: int
    good_refreshes: int
    stale_refreshes: int
    corrupt_refreshes: int
    #: Runs of refreshes that were not good for 50 ms or more, and the longest (0 when there were none).
    freezes: int
    longest_freeze_ms: float
    frames_sent: int
    frames_shown: int
    #: Media packets the viewer rebuilt from FEC repair, and those still lost after it.
    fec_recovered: int
    packets_lost_after_fec: int
    #: Datagrams the host sent again because the viewer asked.
    resends: int
    #: Key frames the viewer asked for, and those the host forced (for whatever reason).
    key_frames_asked: int
    key_frames_forced: int
    latency_ms: Latency
    #: The encoder's mean rate over the run, and the viewer's second-by-second view of it.
    bitrate_mbits: float
    seconds: tuple[Second, ...] = field(repr=False)
    #: Datagrams host → viewer given to the link, and dropped by it (None/0 on a perfect link: no relay between).
    datagrams_on_link: int | None
    datagrams_lost: int
    #: Which ones, by their order on the link from 0: one seed, the same list (over the datagrams both runs sent).
    dropped_datagrams: tuple[int, ...] = field(repr=False)
    #: Every process's own statistics (``bench stream --json``'s), for what is not above.
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def good_refreshes_pct(self) -> float:
        return 100.0 * self.good_refreshes / self.refreshes if self.refreshes else 0.0

    def __str__(self) -> str:
        lat = self.latency_ms
        return (
            f"{self.stream.label()} through {self.link.label()}: {self.good_refreshes_pct:.2f} % of "
            f"{self.refreshes} refreshes good ({self.stale_refreshes} stale, {self.corrupt_refreshes} corrupt), "
            f"longest freeze {self.longest_freeze_ms:.0f} ms; {self.datagrams_lost} datagrams lost on the link, "
            f"{self.fec_recovered} packets recovered by FEC, {self.resends} resent, {self.key_frames_asked} key "
            f"frames asked; latency p50 {_ms(lat.p50)} p95 {_ms(lat.p95)}; {self.bitrate_mbits:.2f} Mbit/s"
        )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _latency(samples: list[float]) -> Latency:
    if len(samples) < 2:
        one = samples[0] if samples else None
        return Latency(one, one, one)
    cuts = statistics.quantiles(samples, n=100, method="inclusive")  # linear between samples, as numpy's
    return Latency(cuts[49], cuts[94], cuts[98])


def result_from(stream: Stream, link: Link, raw: dict[str, Any]) -> StreamResult:
    """One :class:`StreamResult` from a run's statistics (``bench stream``'s: host, viewers, netsim)."""
    host = raw.get("host") or {}
    viewer = (raw.get("viewers") or [{}])[0] or {}
    net = raw.get("netsim") or {}
    quality = (viewer.get("presentation") or {}).get("quality") or {}
    samples = [float(x) for x in viewer.get("latency_ms_samples") or []]
    rows = list(viewer.get("timeline") or [])
    start = rows[0]["t"] - 1.0 if rows else 0.0
    down = net.get("down") or {}
    return StreamResult(
        stream=stream,
        link=link,
        refreshes=int(quality.get("refreshes", 0)),
        good_refreshes=int(quality.get("good_refreshes", 0)),
        stale_refreshes=int(quality.get("stale_refreshes", 0)),
        corrupt_refreshes=int(quality.get("corrupt_refreshes", 0)),
        freezes=int(quality.get("freezes", 0)),
        longest_freeze_ms=float(quality.get("longest_freeze_ms") or 0.0),
        frames_sent=int(host.get("frames_encoded", 0)),
        frames_shown=int(viewer.get("frames_shown", 0)),
        fec_recovered=int(viewer.get("packets_recovered", 0)),
        packets_lost_after_fec=int(viewer.get("packets_lost_video", 0)),
        resends=int(host.get("resent_datagrams", 0)),
        key_frames_asked=int(viewer.get("keyframe_requests", 0)),
        key_frames_forced=int(host.get("keyframes_forced", 0)),
        latency_ms=_latency(samples),
        bitrate_mbits=float(host.get("encoded_mbits", 0.0)),
        seconds=tuple(
            Second(round(r["t"] - start, 3), float(r["received_mbits"]), r.get("stream_kbits"), r.get("good_pct"))
            for r in rows
        ),
        datagrams_on_link=int(down["received"]) if "received" in down else None,
        datagrams_lost=int(down.get("dropped", 0)),
        dropped_datagrams=tuple(int(i) for i in down.get("dropped_at") or ()),
        raw=raw,
    )
