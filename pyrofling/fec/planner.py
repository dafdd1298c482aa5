"""FEC planners: how many repair blocks a frame gets and their XOR degrees.

The plan travels in every datagram header (protocol.md §4.1), so any plan a
planner returns is decodable by a native PyroFling receiver.  Planners are small
objects chosen by name (:func:`make_planner`); the host asks ``plan(n)`` for each
frame of ``n`` data blocks and feeds loss reports to ``observe_*``.

* ``reference`` — the reference server's rule, for exact comparison.
* ``tuned`` — the same repair count (same overhead) with degrees chosen by
  simulation (``pyrofling bench fec --sweep``): the reference's half-frame
  degree wastes parity on large frames.
* ``adaptive`` — the tuned degrees, with the repair count following the
  datagram loss that viewers report.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache
from typing import Protocol

from pyrofling.fec.codec import NO_FEC, FecPlan

#: The reference's redundancy: ⌊n/4⌋ + 1 repair blocks for frames of more than 8 blocks.
REFERENCE_RATIO = 0.25
#: Frames of at most this many blocks get one full-XOR block in the reference.
SMALL_FRAME_BLOCKS = 8
#: The reference server caps degrees at 64 even though the header allows 255.
REFERENCE_MAX_DEGREE = 64


class FecPlanner(Protocol):
    """Chooses a :class:`FecPlan` per frame.  Driven by the host's packetizer."""

    name: str

    def plan(self, data_blocks: int) -> FecPlan:
        """The plan for a frame of ``data_blocks`` (≥ 1) data blocks."""
        ...

    def observe_datagram_loss(self, lost: int, total: int) -> None:
        """A viewer saw ``lost`` of ``total`` datagrams missing (only ``adaptive`` reacts)."""
        ...


def repair_count(data_blocks: int, ratio: float = REFERENCE_RATIO) -> int:
    """Repair blocks for ``data_blocks`` at ``ratio``: the reference's rule at 0.25."""
    if data_blocks <= 0 or ratio <= 0:
        return 0
    if data_blocks <= SMALL_FRAME_BLOCKS and ratio <= REFERENCE_RATIO:
        return 1
    return int(data_blocks * ratio) + 1


def reference_plan(data_blocks: int, repair_blocks: int | None = None) -> FecPlan:
    """The reference server's plan (PyroFling's `pyro_server.cpp`; protocol.md §7.3), optionally with another count."""
    n = data_blocks
    f = repair_count(n) if repair_blocks is None else repair_blocks
    if f == 0:
        return NO_FEC
    if n <= SMALL_FRAME_BLOCKS:
        return FecPlan(f, n, n)
    return FecPlan(f, min(n // 2, REFERENCE_MAX_DEGREE), min((n + 1) // 2, REFERENCE_MAX_DEGREE))


#: Degree sweep results (``pyrofling bench fec --sweep-degrees``): frame size → degree that
#: lost fewest frames under a *peeling* receiver at the reference's overhead, across i.i.d.
#: 0.5–5 % and Gilbert–Elliott loss.  Between anchors the degree is interpolated linearly.
#: Below the first anchor the reference's complementary halves were best; above the last,
#: the degree stays at its value (each block a ~1/6 of a 200-block frame or less).
TUNED_DEGREE_ANCHORS: tuple[tuple[int, int], ...] = (
    (28, 14),
    (32, 13),
    (40, 15),
    (48, 16),
    (64, 19),
    (100, 25),
    (150, 28),
    (200, 32),
)


#: A tuned plan may leave a data block outside every repair block at most this often, so a
#: single loss stays repairable in all but ~1e-5 of frames (the reference's plans: always).
MAX_UNCOVERED_PROBABILITY = 1e-5


def uncovered_probability(data_blocks: int, degree: int, repair_blocks: int) -> float:
    """Chance that a given data block is in no repair block, for equal even/odd degrees.

    Each pool round holds ``n // d`` repair blocks and leaves ``n mod d`` data
    blocks out; the last round may be partial.  Rounds draw independently, so a
    block escapes all of them with the product of the per-round miss chances
    (matches the shuffler within sampling error, tests/test_fec_planner.py).
    """
    n, d = data_blocks, degree
    per_round = n // d
    full_rounds, partial = divmod(repair_blocks, per_round)
    miss_full = (n - per_round * d) / n
    miss_partial = (n - partial * d) / n if partial else 1.0
    return float(miss_full**full_rounds * miss_partial)


def _target_degree(n: int) -> int:
    for (n0, d0), (n1, d1) in itertools.pairwise(TUNED_DEGREE_ANCHORS):
        if n <= n1:
            return round(d0 + (d1 - d0) * (n - n0) / (n1 - n0))
    return TUNED_DEGREE_ANCHORS[-1][1]


@lru_cache(maxsize=4096)
def tuned_degrees(data_blocks: int, repair_blocks: int | None = None) -> tuple[int, int]:
    """Even/odd degrees for a frame of ``data_blocks`` blocks (see :data:`TUNED_DEGREE_ANCHORS`).

    Small frames keep the reference's complementary halves (one full XOR below
    9 blocks): there they are as good as any degree.  Larger frames use lower
    degrees than the reference's n/2: with several losses, more repair blocks
    then have a single unknown member, which is what a peeling receiver (every
    native viewer) needs, and pyrofling's elimination decoder gains further.
    Near the sweep's target, the degree whose pool rounds leave fewest blocks
    uncovered is taken, so single losses stay repairable.
    """
    n = data_blocks
    if n <= SMALL_FRAME_BLOCKS:
        return n, n
    if n <= TUNED_DEGREE_ANCHORS[0][0]:
        return n // 2, (n + 1) // 2
    f = repair_count(n) if repair_blocks is None else repair_blocks
    target = _target_degree(n)
    candidates = range(max(1, round(0.75 * target)), min(n, round(1.25 * target)) + 1)
    safe = [d for d in candidates if uncovered_probability(n, d, f) <= MAX_UNCOVERED_PROBABILITY]
    if not safe:
        return min(n // 2, REFERENCE_MAX_DEGREE), min((n + 1) // 2, REFERENCE_MAX_DEGREE)
    d = min(safe, key=lambda c: (abs(c - target), c))
    return d, d


def tuned_plan(data_blocks: int, repair_blocks: int) -> FecPlan:
    if repair_blocks == 0 or data_blocks == 0:
        return NO_FEC
    even, odd = tuned_degrees(data_blocks, repair_blocks)
    return FecPlan(repair_blocks, even, odd)


class ReferencePlanner:
    """The reference rule: ⌊n/4⌋+1 blocks of degree n/2 (one full XOR for n ≤ 8)."""

    name = "reference"

    def __init__(self, *, ratio: float = REFERENCE_RATIO) -> None:
        self.ratio = ratio

    def plan(self, data_blocks: int) -> FecPlan:
        return reference_plan(data_blocks, repair_count(data_blocks, self.ratio))

    def observe_datagram_loss(self, lost: int, total: int) -> None:
        pass


class TunedPlanner:
    """Same repair count as the reference at ``ratio``; degrees from :func:`tuned_degrees`."""

    name = "tuned"

    def __init__(self, *, ratio: float = REFERENCE_RATIO) -> None:
        self.ratio = ratio

    def plan(self, data_blocks: int) -> FecPlan:
        return tuned_plan(data_blocks, repair_count(data_blocks, self.ratio))

    def observe_datagram_loss(self, lost: int, total: int) -> None:
        pass


def binomial_tail(trials: int, p: float, more_than: int) -> float:
    """P(X > more_than) for X ~ Binomial(trials, p)."""
    if more_than < 0:
        return 1.0
    if more_than >= trials or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    term = (1.0 - p) ** trials  # P(X = 0)
    cdf = term
    for k in range(1, more_than + 1):
        term *= (trials - k + 1) / k * p / (1.0 - p)
        cdf += term
    return max(0.0, 1.0 - cdf)


class AdaptivePlanner:
    """Repair count follows the reported datagram loss; degrees as ``tuned``.

    The loss estimate is an exponentially weighted average of reports.  For a
    frame of ``n`` blocks it picks the smallest repair count ``F`` (between
    ``min_ratio`` and ``max_ratio`` of ``n``, at least one block) for which
    i.i.d. loss at the estimate would lose more than ``efficiency·F`` of the
    ``n + F`` datagrams with probability at most ``target_frame_loss``.
    ``efficiency`` is the share of its parity the mirrored-XOR code can use (the
    bench measures about 0.5–0.7 for the tuned degrees with elimination); with
    Reed–Solomon (:meth:`use_mds`) every repair block counts.
    """

    name = "adaptive"

    def __init__(
        self,
        *,
        target_frame_loss: float = 1e-3,
        min_ratio: float = 0.05,
        max_ratio: float = 1.0,
        efficiency: float = 0.5,
        smoothing: float = 0.2,
        initial_loss: float = 0.01,
    ) -> None:
        if not 0 < target_frame_loss < 1:
            raise ValueError("target_frame_loss must be in (0, 1)")
        if not 0 <= min_ratio <= max_ratio:
            raise ValueError("need 0 <= min_ratio <= max_ratio")
        self.target_frame_loss = target_frame_loss
        self.min_ratio = min_ratio
        self.max_ratio = max_ratio
        self.efficiency = efficiency
        self.smoothing = smoothing
        self.loss_estimate = initial_loss
        self._cache: dict[int, int] = {}

    def use_mds(self) -> None:
        """The repair is Reed–Solomon (protocol.md §7.8): any F repair blocks replace F lost ones."""
        self.efficiency = 1.0
        self._cache.clear()

    def observe_datagram_loss(self, lost: int, total: int) -> None:
        if total <= 0 or lost < 0:
            return
        rate = min(1.0, lost / total)
        # Up fast (a step to 5 % loss is followed within a few reports), down slowly (loss comes back in bursts).
        gain = self.smoothing if rate < self.loss_estimate else max(self.smoothing, 0.5)
        self.loss_estimate += gain * (rate - self.loss_estimate)
        self._cache.clear()

    def repair_blocks_for(self, data_blocks: int) -> int:
        n = data_blocks
        cached = self._cache.get(n)
        if cached is not None:
            return cached
        low = max(1, math.ceil(self.min_ratio * n))
        high = max(low, math.ceil(self.max_ratio * n))
        f = low
        while f < high and binomial_tail(n + f, self.loss_estimate, int(self.efficiency * f)) > self.target_frame_loss:
            f += 1
        self._cache[n] = f
        return f

    def plan(self, data_blocks: int) -> FecPlan:
        return tuned_plan(data_blocks, self.repair_blocks_for(data_blocks))


class NoFecPlanner:
    """No repair blocks at all (``--no-fec``)."""

    name = "none"

    def plan(self, data_blocks: int) -> FecPlan:
        return NO_FEC

    def observe_datagram_loss(self, lost: int, total: int) -> None:
        pass


PLANNERS = ("reference", "tuned", "adaptive", "none")


def make_planner(name: str, *, ratio: float = REFERENCE_RATIO) -> FecPlanner:
    """A planner by name; ``ratio`` sets the redundancy of ``reference`` and ``tuned``."""
    if name == "reference":
        return ReferencePlanner(ratio=ratio)
    if name == "tuned":
        return TunedPlanner(ratio=ratio)
    if name == "adaptive":
        return AdaptivePlanner()
    if name == "none":
        return NoFecPlanner()
    raise ValueError(f"unknown FEC planner {name!r}; choose one of {', '.join(PLANNERS)}")
