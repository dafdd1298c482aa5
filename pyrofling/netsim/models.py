"""Network impairment models: loss, delay, jitter, reordering, duplication, a rate cap.

Pure and seeded: nothing here reads a clock or touches a socket, so tests and
benches can push millions of datagrams through them in-process.  The relay
(:mod:`pyrofling.netsim.relay`) uses one :class:`Impairment` per direction.

Loss models implement :class:`LossModel`: ``lose()`` is asked once per datagram,
in order, and answers whether the network drops it.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol


class LossModel(Protocol):
    name: str

    def lose(self) -> bool:
        """Whether the next datagram is lost."""
        ...


class NoLoss:
    name = "none"

    def lose(self) -> bool:
        return False


class IidLoss:
    """Each datagram is lost independently with probability ``p``."""

    name = "iid"

    def __init__(self, p: float, *, rng: random.Random) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"loss probability {p} is not in [0, 1]")
        self.p = p
        self._rng = rng

    def lose(self) -> bool:
        return self._rng.random() < self.p


class GilbertElliottLoss:
    """Two-state burst loss: a good and a bad state with their own loss rates.

    Per datagram, the current state decides the loss, then the chain moves:
    good→bad with ``p_good_bad``, bad→good with ``p_bad_good``.  The defaults
    (1 %, 30 %, 50 % loss when bad) give ≈1.6 % mean loss in bursts of ≈3.3.
    """

    name = "gilbert-elliott"

    def __init__(
        self,
        *,
        p_good_bad: float = 0.01,
        p_bad_good: float = 0.30,
        loss_bad: float = 0.5,
        loss_good: float = 0.0,
        rng: random.Random,
    ) -> None:
        for name, value in (
            ("p_good_bad", p_good_bad),
            ("p_bad_good", p_bad_good),
            ("loss_bad", loss_bad),
            ("loss_good", loss_good),
        ):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value} is not a probability")
        self.p_good_bad = p_good_bad
        self.p_bad_good = p_bad_good
        self.loss_bad = loss_bad
        self.loss_good = loss_good
        self.bad = False
        self._rng = rng

    @property
    def mean_loss(self) -> float:
        """Stationary loss rate of the chain."""
        total = self.p_good_bad + self.p_bad_good
        if total == 0:
            return self.loss_bad if self.bad else self.loss_good
        share_bad = self.p_good_bad / total
        return share_bad * self.loss_bad + (1 - share_bad) * self.loss_good

    def lose(self) -> bool:
        rng = self._rng
        p = self.loss_bad if self.bad else self.loss_good
        lost = p > 0 and rng.random() < p  # no draw where nothing can be lost: the stream of draws stays short
        if self.bad:
            if rng.random() < self.p_bad_good:
                self.bad = False
        elif rng.random() < self.p_good_bad:
            self.bad = True
        return lost


class TraceLoss:
    """Replays a recorded loss pattern, cycling: one flag per datagram (True = lost)."""

    name = "trace"

    def __init__(self, pattern: Sequence[bool]) -> None:
        if not pattern:
            raise ValueError("loss trace is empty")
        self.pattern = pattern
        self._i = 0

    @staticmethod
    def parse(text: str, *, name: str = "loss trace") -> tuple[bool, ...]:
        """A trace's flags from its text: ``0``/``1`` (1 = lost); whitespace, commas and ``#`` comments ignored."""
        flags: list[bool] = []
        for lineno, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0]
            for ch in line:
                if ch in "01":
                    flags.append(ch == "1")
                elif not ch.isspace() and ch != ",":
                    raise ValueError(f"{name}:{lineno}: a loss trace holds only 0 and 1, found {ch!r}")
        if not flags:
            raise ValueError(f"{name}: the loss trace is empty")
        return tuple(flags)

    def lose(self) -> bool:
        lost = self.pattern[self._i]
        self._i = (self._i + 1) % len(self.pattern)
        return lost


#: The keys a schedule step may change, with their unit's factor to the config's unit and the config field.
_STEP_KEYS: dict[str, tuple[str, float]] = {
    "rate-mbits": ("rate_bits_per_s", 1e6),
    "delay-ms": ("delay_s", 1e-3),
    "jitter-ms": ("jitter_s", 1e-3),
    "delay-sigma-ms": ("delay_sigma_s", 1e-3),
    "loss": ("loss", 1.0),
    "queue-kbytes": ("queue_bytes", 1024.0),
    "queue-ms": ("queue_s", 1e-3),
}


@dataclass(frozen=True, slots=True)
class LinkChange:
    """What the link becomes ``at_s`` seconds after the relay starts: the fields given, the rest unchanged."""

    at_s: float
    changes: tuple[tuple[str, float], ...]  # (ImpairmentConfig field, value in its unit)

    def describe(self) -> str:
        names = {f: (k, scale) for k, (f, scale) in _STEP_KEYS.items()}
        parts = []
        for name, value in self.changes:
            key, scale = names[name]
            parts.append(f"{key}={value / scale:g}")
        return f"{self.at_s:g} s: " + " ".join(parts)

    @staticmethod
    def parse_schedule(text: str, *, name: str = "schedule") -> tuple[LinkChange, ...]:
        """Steps ``T KEY=VALUE ...`` separated by ``;`` or new lines (``#`` starts a comment), in time order.

        Keys: ``rate-mbits`` (0: unlimited), ``delay-ms``, ``jitter-ms``, ``loss`` (0.02 or 2%),
        ``queue-kbytes``, ``queue-ms`` (the queue as time at the current rate).  ``T`` is seconds (``10`` or
        ``10s``) after the relay starts.  Example: ``10 rate-mbits=4; 30 rate-mbits=10``.
        """
        steps: list[LinkChange] = []
        lines = [line.split("#", 1)[0] for line in text.splitlines()]
        for lineno, line in enumerate(lines, 1):
            for part in line.split(";"):
                words = part.split()
                if not words:
                    continue
                where = f"{name}:{lineno}: {part.strip()!r}"
                try:
                    at_s = float(words[0].removesuffix("s"))
                except ValueError:
                    raise ValueError(
                        f"{where}: a step starts with its time in seconds, e.g. '10 rate-mbits=4'"
                    ) from None
                if at_s < 0 or (steps and at_s < steps[-1].at_s):
                    raise ValueError(f"{where}: steps must be in time order, from 0 s on")
                if len(words) == 1:
                    raise ValueError(f"{where}: say what changes, e.g. '{words[0]} rate-mbits=4'")
                changes = []
                for word in words[1:]:
                    key, _, value = word.partition("=")
                    if key not in _STEP_KEYS:
                        raise ValueError(f"{where}: unknown key {key!r}; use {', '.join(_STEP_KEYS)}")
                    field_name, scale = _STEP_KEYS[key]
                    try:
                        number = float(value[:-1]) / 100 if value.endswith("%") else float(value)
                    except ValueError:
                        raise ValueError(f"{where}: {key} needs a number, not {value!r}") from None
                    if number < 0 or (key == "loss" and number > 1):
                        raise ValueError(f"{where}: {key}={value} is out of range")
                    changes.append((field_name, number * scale))
                steps.append(LinkChange(at_s, tuple(changes)))
        if not steps:
            raise ValueError(f"{name}: the schedule has no steps")
        return tuple(steps)


@dataclass(frozen=True, slots=True)
class ImpairmentConfig:
    """What one direction of the simulated network does.  Defaults: a perfect link."""

    #: i.i.d. loss probability.
    loss: float = 0.0
    #: Gilbert–Elliott (p_good_bad, p_bad_good, loss_bad); replaces ``loss`` when set.
    gilbert_elliott: tuple[float, float, float] | None = None
    #: A loss trace (one flag per datagram, True = lost, cycled; see :meth:`TraceLoss.parse`); replaces the
    #: other loss settings when set.
    loss_trace: tuple[bool, ...] | None = None
    #: One-way delay added to every datagram, seconds.
    delay_s: float = 0.0
    #: Uniform extra delay in [0, jitter_s], seconds; datagrams may overtake each other.
    jitter_s: float = 0.0
    #: Gaussian variation of the delay around ``delay_s`` (σ, seconds), as a queue that fills and drains
    #: makes it: correlated over ``delay_sigma_corr_s`` (a burst shares its delay) and order kept.
    delay_sigma_s: float = 0.0
    delay_sigma_corr_s: float = 0.01
    #: Probability that a datagram is held back by ``reorder_delay_s`` so later ones pass it.
    reorder: float = 0.0
    reorder_delay_s: float = 0.002
    #: Probability that a datagram is delivered twice.
    duplicate: float = 0.0
    #: Bottleneck rate in bit/s (0 = unlimited); a queue of ``queue_bytes`` drops from the tail.
    rate_bits_per_s: float = 0.0
    queue_bytes: int = 256 * 1024
    #: The bottleneck queue as time at the current rate instead (what a router sized for its link holds):
    #: its size in bytes follows the rate.  None: ``queue_bytes``.
    queue_s: float | None = None
    #: Changes of the link over time (:meth:`LinkChange.parse_schedule`), from the first datagram or
    #: :meth:`Impairment.start`.
    schedule: tuple[LinkChange, ...] = ()
    #: Outages, as Wi-Fi has them: (mean seconds between outage starts, shortest, longest outage in seconds).
    #: The link drops everything during one; starts are a Poisson process, lengths uniform.  None: no outages.
    outages: tuple[float, float, float] | None = None


@dataclass(slots=True)
class BytePacer:
    """A bottleneck for a byte stream (a TCP connection through the relay): when each chunk has crossed it, so
    that chunks cross at ``bits_per_s``.  The relay reads no faster, and TCP's flow control makes the sender's
    socket buffer the queue, as a real bottleneck's queue does."""

    bits_per_s: float
    _free_s: float = 0.0

    def crossed_at(self, size: int, now: float) -> float:
        start = max(now, self._free_s)
        self._free_s = start + size * 8 / self.bits_per_s
        return self._free_s


@dataclass(slots=True)
class DirectionStats:
    """What one direction did, for the report."""

    received: int = 0
    forwarded: int = 0
    dropped_loss: int = 0
    dropped_queue: int = 0
    duplicated: int = 0
    reordered: int = 0
    bytes_forwarded: int = 0

    dropped_outage: int = 0
    outages: int = 0

    @property
    def dropped(self) -> int:
        return self.dropped_loss + self.dropped_queue + self.dropped_outage

    def as_dict(self) -> dict[str, int]:
        return {
            "received": self.received,
            "forwarded": self.forwarded,
            "dropped": self.dropped,
            "dropped_loss": self.dropped_loss,
            "dropped_queue": self.dropped_queue,
            "dropped_outage": self.dropped_outage,
            "outages": self.outages,
            "duplicated": self.duplicated,
            "reordered": self.reordered,
            "bytes_forwarded": self.bytes_forwarded,
        }


def make_loss_model(config: ImpairmentConfig, rng: random.Random) -> LossModel:
    if config.loss_trace:
        return TraceLoss(config.loss_trace)
    if config.gilbert_elliott is not None:
        gb, bg, bad = config.gilbert_elliott
        return GilbertElliottLoss(p_good_bad=gb, p_bad_good=bg, loss_bad=bad, rng=rng)
    if config.loss > 0:
        return IidLoss(config.loss, rng=rng)
    return NoLoss()


class Outages:
    """A seeded schedule of outages on the time axis: :meth:`active` says whether the link is down at ``now``.

    Times must not go backwards.  The schedule starts at the first time asked.
    """

    def __init__(self, mean_interval_s: float, shortest_s: float, longest_s: float, *, rng: random.Random) -> None:
        if not mean_interval_s > 0:
            raise ValueError("the mean time between outages must be more than 0 s")
        if not 0 < shortest_s <= longest_s:
            raise ValueError("outage lengths need 0 < shortest <= longest")
        self.mean_interval_s = mean_interval_s
        self.shortest_s, self.longest_s = shortest_s, longest_s
        self._rng = rng
        self._start: float | None = None
        self._end = float("-inf")
        self.count = 0

    def active(self, now: float) -> bool:
        if self._start is None:
            self._start = now + self._rng.expovariate(1.0 / self.mean_interval_s)
        while now >= self._start:  # the outage that starts at or before now
            self._end = self._start + self._rng.uniform(self.shortest_s, self.longest_s)
            self.count += 1
            self._start = self._end + self._rng.expovariate(1.0 / self.mean_interval_s)
        return now < self._end


@dataclass(slots=True)
class _Link:
    free_at_s: float = 0.0
    # (departure time, bytes) of datagrams still in the bottleneck queue; departures only grow.
    queued: deque[tuple[float, int]] = field(default_factory=deque)
    queued_bytes: int = 0


class Impairment:
    """One direction of the simulated network.

    Call :meth:`process` with each datagram's size and arrival time, in arrival
    order; it returns the times at which copies leave the far side (empty list:
    dropped; two entries: duplicated).  The caller delivers them at those times.
    """

    def __init__(self, config: ImpairmentConfig, *, seed: int = 1, record_drops: bool = False) -> None:
        self.config = config
        #: With ``record_drops``: each dropped datagram's place on the link (0 the first it was given), so that two
        #: runs with one seed can be shown to drop the same ones.
        self.dropped_at: list[int] | None = [] if record_drops else None
        #: The link as it is now (``config`` with the schedule's changes so far).
        self.current = config
        self._seed = seed
        self._rng = random.Random(seed)
        self.loss_model = make_loss_model(config, random.Random(seed ^ 0x5EED))
        self._origin_s: float | None = None
        self._next_step = 0
        #: (seconds after the start, the change) of each step applied so far.
        self.applied: list[tuple[float, str]] = []
        self.stats = DirectionStats()
        self._link = _Link()
        self._last_departure_s = float("-inf")
        self._variation = (0.0, float("-inf"))  # (the delay variation's state in σ, when last drawn)
        self.outages = Outages(*config.outages, rng=random.Random(seed ^ 0x0A7E)) if config.outages else None

    def start(self, now: float) -> None:
        """The schedule's time 0 (otherwise the first datagram's arrival)."""
        if self._origin_s is None:
            self._origin_s = now

    @property
    def queue_limit_bytes(self) -> int:
        cfg = self.current
        if cfg.queue_s is not None and cfg.rate_bits_per_s > 0:
            return max(1500, int(cfg.rate_bits_per_s / 8 * cfg.queue_s))
        return cfg.queue_bytes

    def _follow_schedule(self, now: float) -> None:
        self.start(now)
        assert self._origin_s is not None
        steps = self.config.schedule
        while self._next_step < len(steps) and now - self._origin_s >= steps[self._next_step].at_s:
            step = steps[self._next_step]
            self._next_step += 1
            changes: dict[str, Any] = {k: int(v) if k == "queue_bytes" else v for k, v in step.changes}
            self.current = replace(self.current, **changes)
            if "loss" in changes:  # a loss step replaces the loss model with i.i.d. loss at that rate
                cfg = replace(self.current, gilbert_elliott=None, loss_trace=None)
                self.loss_model = make_loss_model(cfg, random.Random(self._seed ^ 0x5EED ^ self._next_step))
            self.applied.append((round(now - self._origin_s, 3), step.describe()))

    def _vary(self, now: float, corr_s: float) -> float:
        """The next value of a unit Gaussian process correlated over ``corr_s`` (an AR(1) in time)."""
        x, last = self._variation
        keep = math.exp(-(now - last) / corr_s) if corr_s > 0 and now > last else 0.0
        x = keep * x + math.sqrt(1.0 - keep * keep) * self._rng.gauss(0.0, 1.0)
        self._variation = (x, now)
        return x

    def _dropped(self) -> list[float]:
        if self.dropped_at is not None:
            self.dropped_at.append(self.stats.received - 1)
        return []

    def process(self, now: float, size_bytes: int) -> list[float]:
        if self.config.schedule:
            self._follow_schedule(now)
        cfg = self.current
        stats = self.stats
        stats.received += 1
        if self.outages is not None and self.outages.active(now):
            stats.dropped_outage += 1
            stats.outages = self.outages.count
            return self._dropped()
        if self.loss_model.lose():
            stats.dropped_loss += 1
            return self._dropped()
        depart = now
        if cfg.rate_bits_per_s > 0:
            link = self._link
            while link.queued and link.queued[0][0] <= now:
                link.queued_bytes -= link.queued.popleft()[1]
            if link.queued_bytes + size_bytes > self.queue_limit_bytes:
                stats.dropped_queue += 1
                return self._dropped()
            start = max(now, link.free_at_s)
            link.free_at_s = start + size_bytes * 8.0 / cfg.rate_bits_per_s
            link.queued.append((link.free_at_s, size_bytes))
            link.queued_bytes += size_bytes
            depart = link.free_at_s
        rng = self._rng
        depart += cfg.delay_s
        if cfg.jitter_s > 0:
            depart += rng.uniform(0.0, cfg.jitter_s)
        if cfg.delay_sigma_s > 0:
            depart = max(depart + cfg.delay_sigma_s * self._vary(now, cfg.delay_sigma_corr_s), now,
                         self._last_departure_s)  # fmt: skip
        if cfg.reorder > 0 and rng.random() < cfg.reorder:
            depart += cfg.reorder_delay_s
        if depart < self._last_departure_s:
            stats.reordered += 1
        self._last_departure_s = max(self._last_departure_s, depart)
        times = [depart]
        if cfg.duplicate > 0 and rng.random() < cfg.duplicate:
            stats.duplicated += 1
            times.append(depart + 0.0001)
        stats.forwarded += len(times)
        stats.bytes_forwarded += size_bytes * len(times)
        return times
