"""Network impairment models: loss, delay, jitter, reordering, duplication, a rate cap.

Pure and seeded: nothing here reads a clock or touches a socket, so tests and
benches can push millions of datagrams through them in-process.  The relay
(:mod:`pyrofling.netsim.relay`) uses one :class:`Impairment` per direction.

Loss models implement :class:`LossModel`: ``lose()`` is asked once per datagram,
in order, and answers whether the network drops it.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


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
    #: Probability that a datagram is held back by ``reorder_delay_s`` so later ones pass it.
    reorder: float = 0.0
    reorder_delay_s: float = 0.002
    #: Probability that a datagram is delivered twice.
    duplicate: float = 0.0
    #: Bottleneck rate in bit/s (0 = unlimited); a queue of ``queue_bytes`` drops from the tail.
    rate_bits_per_s: float = 0.0
    queue_bytes: int = 256 * 1024
    #: Outages, as Wi-Fi has them: (mean seconds between outage starts, shortest, longest outage in seconds).
    #: The link drops everything during one; starts are a Poisson process, lengths uniform.  None: no outages.
    outages: tuple[float, float, float] | None = None


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

    def __init__(self, config: ImpairmentConfig, *, seed: int = 1) -> None:
        self.config = config
        self._rng = random.Random(seed)
        self.loss_model = make_loss_model(config, random.Random(seed ^ 0x5EED))
        self.stats = DirectionStats()
        self._link = _Link()
        self._last_departure_s = float("-inf")
        self.outages = Outages(*config.outages, rng=random.Random(seed ^ 0x0A7E)) if config.outages else None

    def process(self, now: float, size_bytes: int) -> list[float]:
        cfg = self.config
        stats = self.stats
        stats.received += 1
        if self.outages is not None and self.outages.active(now):
            stats.dropped_outage += 1
            stats.outages = self.outages.count
            return []
        if self.loss_model.lose():
            stats.dropped_loss += 1
            return []
        depart = now
        if cfg.rate_bits_per_s > 0:
            link = self._link
            while link.queued and link.queued[0][0] <= now:
                link.queued_bytes -= link.queued.popleft()[1]
            if link.queued_bytes + size_bytes > cfg.queue_bytes:
                stats.dropped_queue += 1
                return []
            start = max(now, link.free_at_s)
            link.free_at_s = start + size_bytes * 8.0 / cfg.rate_bits_per_s
            link.queued.append((link.free_at_s, size_bytes))
            link.queued_bytes += size_bytes
            depart = link.free_at_s
        rng = self._rng
        depart += cfg.delay_s
        if cfg.jitter_s > 0:
            depart += rng.uniform(0.0, cfg.jitter_s)
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
