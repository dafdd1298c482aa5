"""The reference's block shuffler, bit-exact (protocol.md §5.2).

A ``minstd_rand`` Lehmer generator (x ← 48271·x mod 2³¹−1) drives a draw without
replacement from a pool of block indices.  The pool is refilled with 0..n−1, in
order, only when fewer entries remain than the next repair block needs; leftovers
are then discarded.  Repair block ``i`` draws ``degree_even`` indices when ``i`` is
even and ``degree_odd`` when odd.  Because even + odd = n for the reference's
plans, each even/odd pair splits the frame into two complementary halves.

Speed: the generator's outputs come from one numpy step (xₜ = aᵗ·x₀ mod m with a
cached table of powers of a), and so do the pool sizes; only the pool swaps stay
a Python loop (a draw takes the picked entry out by swapping it with the last one,
so after a round the picks sit at the end of the pool in reverse draw order).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

import numpy as np
import numpy.typing as npt

LEHMER_MULTIPLIER = 48271
LEHMER_MODULUS = (1 << 31) - 1

# _powers[t] = a**(t+1) mod m.  Products of two values below 2**31 fit in int64.
_powers: npt.NDArray[np.int64] = np.array([LEHMER_MULTIPLIER], dtype=np.int64)


def lehmer_seed(seed: int) -> int:
    """State after seeding, as ``std::minstd_rand::seed`` does (0 becomes 1)."""
    return (seed % LEHMER_MODULUS) or 1


def lehmer_outputs(seed: int, count: int) -> npt.NDArray[np.int64]:
    """The first ``count`` generator outputs after seeding with ``seed``."""
    global _powers
    while len(_powers) < count:
        # Doubling: a**(t+L) = a**t · a**L.
        _powers = np.concatenate([_powers, _powers * int(_powers[-1]) % LEHMER_MODULUS])
    return _powers[:count] * lehmer_seed(seed) % LEHMER_MODULUS


@dataclass(frozen=True, slots=True)
class Layout:
    """The seed-independent shape of a selection: where blocks and pool refills fall.

    ``offsets[i]:offsets[i + 1]`` is repair block ``i``'s slice of the picks;
    ``rounds`` lists the first repair block of each pool refill plus the total;
    ``exhaustive[r]`` says round ``r`` drew the whole pool, so its blocks XOR
    together to the parity of the whole frame.
    """

    data_blocks: int
    degrees: tuple[int, ...]
    offsets: tuple[int, ...]
    rounds: tuple[int, ...]
    round_starts: tuple[int, ...]
    exhaustive: tuple[bool, ...]
    pool_sizes: npt.NDArray[np.int64]


@lru_cache(maxsize=1024)
def layout(data_blocks: int, degrees: tuple[int, ...]) -> Layout:
    """Cached :class:`Layout` for ``data_blocks`` and per-block ``degrees`` (each in 1..n)."""
    n = data_blocks
    offsets = [0]
    rounds: list[int] = []
    round_starts: list[int] = []  # draw index where each round starts
    remaining = 0
    total = 0
    for i, k in enumerate(degrees):
        if remaining < k:
            remaining = n
            rounds.append(i)
            round_starts.append(total)
        remaining -= k
        total += k
        offsets.append(total)
    rounds.append(len(degrees))
    round_starts.append(total)
    lengths = [b - a for a, b in pairwise(round_starts)]
    # Pool size at draw t is n minus the draws already made in its round.
    round_start_of_draw = np.repeat(np.array(round_starts[:-1], dtype=np.int64), lengths)
    sizes: npt.NDArray[np.int64] = n - (np.arange(total, dtype=np.int64) - round_start_of_draw)
    return Layout(
        n,
        degrees,
        tuple(offsets),
        tuple(rounds),
        tuple(round_starts),
        tuple(length == n for length in lengths),
        sizes,
    )


class Selections:
    """Which data blocks each repair block XORs, replayed lazily one pool round at a time.

    ``block(i)`` gives repair block ``i``'s data blocks (replaying rounds up to
    its own); :attr:`picks` replays everything and gives them all, sliced by
    ``layout.offsets``.  A decoder that finds its answer in the first rounds
    never pays for the rest.
    """

    __slots__ = ("_draw_order", "_pick_at", "_picks", "_rounds_done", "_seed", "layout")

    def __init__(self, seed: int, data_blocks: int, degrees: tuple[int, ...], *, draw_order: bool = False) -> None:
        self.layout = layout(data_blocks, degrees)
        self._seed = seed
        self._pick_at: npt.NDArray[np.int64] | None = None  # generated on the first replay
        self._picks: list[int] = []
        self._rounds_done = 0
        self._draw_order = draw_order

    def __len__(self) -> int:
        return len(self.layout.degrees)

    def _replay(self, upto_round: int) -> None:
        lay = self.layout
        n = lay.data_blocks
        starts = lay.round_starts
        if self._pick_at is None:
            self._pick_at = lehmer_outputs(self._seed, starts[-1]) % lay.pool_sizes
        while self._rounds_done <= upto_round:
            r = self._rounds_done
            a, b = starts[r], starts[r + 1]
            # In a round that drains the pool, the last block takes whatever is left.
            tail = 0 if self._draw_order or not lay.exhaustive[r] else lay.degrees[lay.rounds[r + 1] - 1]
            swaps = b - a - tail
            pool = list(range(n))
            for j, last in zip(self._pick_at[a : a + swaps].tolist(), range(n - 1, n - 1 - swaps, -1), strict=True):
                pool[j], pool[last] = pool[last], pool[j]
            self._picks.extend(reversed(pool[n - swaps :]))
            self._picks.extend(pool[:tail])
            self._rounds_done += 1

    def block(self, i: int) -> list[int]:
        if not self._draw_order and self.layout.degrees[i] == self.layout.data_blocks:
            return list(range(self.layout.data_blocks))  # a full XOR needs no replay
        offsets = self.layout.offsets
        if offsets[i + 1] > len(self._picks):
            self._replay(bisect_right(self.layout.rounds, i) - 1)
        return self._picks[offsets[i] : offsets[i + 1]]

    @property
    def picks(self) -> list[int]:
        if self._rounds_done < len(self.layout.rounds) - 1:
            self._replay(len(self.layout.rounds) - 2)
        return self._picks


def select(seed: int, data_blocks: int, degrees: tuple[int, ...], *, draw_order: bool = False) -> Selections:
    """Replay the shuffler for repair blocks of the given degrees (lazily, see :class:`Selections`).

    Every degree must be in ``1..data_blocks`` (callers validate peer values first).
    With ``draw_order=False`` the last block of a round that drains the pool gets
    its members as a set (what is left in the pool), skipping their swaps; XOR
    does not care about order.  ``True`` gives the reference's exact draw order.
    """
    return Selections(seed, data_blocks, degrees, draw_order=draw_order)


def repair_selections(seed: int, data_blocks: int, degrees: list[int]) -> list[list[int]]:
    """Each repair block's data-block indices, in draw order (the reference's test vectors)."""
    s = select(seed, data_blocks, tuple(degrees), draw_order=True)
    return [s.block(i) for i in range(len(s))]
