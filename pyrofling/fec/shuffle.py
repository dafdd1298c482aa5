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


@dataclass(frozen=True, slots=True)
class Selections:
    """Which data blocks each repair block XORs: ``picks`` sliced by ``layout.offsets``."""

    layout: Layout
    picks: list[int]

    def block(self, i: int) -> list[int]:
        offsets = self.layout.offsets
        return self.picks[offsets[i] : offsets[i + 1]]

    def __len__(self) -> int:
        return len(self.layout.degrees)


def select(seed: int, data_blocks: int, degrees: tuple[int, ...], *, draw_order: bool = False) -> Selections:
    """Replay the shuffler for repair blocks of the given degrees.

    Every degree must be in ``1..data_blocks`` (callers validate peer values first).
    With ``draw_order=False`` the last block of a round that drains the pool gets
    its members as a set (what is left in the pool), skipping their swaps; XOR
    does not care about order.  ``True`` gives the reference's exact draw order.
    """
    n = data_blocks
    lay = layout(n, degrees)
    starts = lay.round_starts
    total = starts[-1]
    picks_at = (lehmer_outputs(seed, total) % lay.pool_sizes).tolist() if total else []
    picks: list[int] = []
    for r in range(len(starts) - 1):
        a, b = starts[r], starts[r + 1]
        pool = list(range(n))
        # In a round that drains the pool, the last block takes whatever is left.
        tail = 0 if draw_order or not lay.exhaustive[r] else degrees[lay.rounds[r + 1] - 1]
        swaps = b - a - tail
        for j, last in zip(picks_at[a : a + swaps], range(n - 1, n - 1 - swaps, -1), strict=False):
            pool[j], pool[last] = pool[last], pool[j]
        picks.extend(reversed(pool[n - swaps :]))
        picks.extend(pool[:tail])
    return Selections(lay, picks)


def repair_selections(seed: int, data_blocks: int, degrees: list[int]) -> list[list[int]]:
    """Each repair block's data-block indices, in draw order (the reference's test vectors)."""
    s = select(seed, data_blocks, tuple(degrees), draw_order=True)
    return [s.block(i) for i in range(len(s))]
