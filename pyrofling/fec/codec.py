"""Mirrored-XOR fountain FEC: encoder and decoder (protocol.md §5).

A frame of ``N`` bytes is split into ``n = ceil(N / block_bytes)`` data blocks, the
last zero-padded.  Repair block ``i`` is the XOR of the data blocks that the
shuffler (:mod:`pyrofling.fec.shuffle`) selects for it, seeded with the low 32
bits of the packet's pts.  The plan (repair count and the even/odd degrees)
travels in every datagram header, so a receiver decodes whatever the sender chose.

Decoding is exact or nothing: a frame comes back byte-identical or not at all.
The decoder first *peels* (a repair block with one unknown member reveals it, as
the reference does) and, if peeling stalls, solves the remaining unknowns by
Gaussian elimination over GF(2), which recovers loss patterns that stop a peeling
decoder.  Both steps work on small integer bitmasks first and touch block data
only once the solution is known, so a failed attempt costs no XORs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from pyrofling.fec.shuffle import Selections, layout, select

BLOCK_BYTES = 1024
#: Largest degree the header can carry (u8 fields).
MAX_DEGREE = 255
#: Largest repair index the 14-bit subpacket field can carry.
MAX_REPAIR_BLOCKS = 1 << 14


class FecError(ValueError):
    """A plan, index or block that cannot belong to this frame."""


@dataclass(frozen=True, slots=True)
class FecPlan:
    """How many repair blocks a frame gets and the XOR degree of even/odd ones."""

    repair_blocks: int
    degree_even: int
    degree_odd: int

    def degrees(self) -> list[int]:
        """Degree of each repair block, in order."""
        return [self.degree_odd if i & 1 else self.degree_even for i in range(self.repair_blocks)]

    def check(self, data_blocks: int) -> None:
        """Raise :class:`FecError` unless the plan is usable for a frame of ``data_blocks``."""
        if not 0 <= self.repair_blocks <= MAX_REPAIR_BLOCKS:
            raise FecError(f"{self.repair_blocks} repair blocks is out of range")
        if self.repair_blocks == 0:
            return
        for name, degree in (("even", self.degree_even), ("odd", self.degree_odd)):
            if not 1 <= degree <= min(data_blocks, MAX_DEGREE):
                raise FecError(f"{name} degree {degree} is not in 1..{min(data_blocks, MAX_DEGREE)}")


#: The plan of a packet sent without FEC.
NO_FEC = FecPlan(0, 0, 0)


def block_count(frame_bytes: int, block_bytes: int = BLOCK_BYTES) -> int:
    """Number of data blocks (datagrams) a frame of ``frame_bytes`` needs."""
    return -(-frame_bytes // block_bytes)


def seed_for_pts(pts_us: int) -> int:
    """The shuffler seed of a packet: the low 32 bits of its pts."""
    return pts_us & 0xFFFFFFFF


def _word_view(buf: npt.NDArray[np.uint8], rows: int, block_bytes: int) -> npt.NDArray[Any]:
    """``(rows, words)`` view of a byte buffer, 8 bytes a word when the block size allows."""
    if block_bytes % 8 == 0:
        return buf[: rows * block_bytes].view(np.uint64).reshape(rows, block_bytes // 8)
    return buf[: rows * block_bytes].reshape(rows, block_bytes)


@dataclass(frozen=True, slots=True)
class _EncodeLayout:
    """Seed-independent gather positions for one (data_blocks, plan); cached."""

    degrees: tuple[int, ...]
    #: (repair block indices, positions into the picks) per degree, for blocks computed directly.
    groups: tuple[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]], ...]
    #: (first, last) repair block of each round that drew every data block.
    closing: tuple[tuple[int, int], ...]


@lru_cache(maxsize=1024)
def _encode_layout(data_blocks: int, plan: FecPlan) -> _EncodeLayout:
    degrees = tuple(plan.degrees())
    lay = layout(data_blocks, degrees)
    closing = tuple((lay.rounds[r], lay.rounds[r + 1] - 1) for r, full in enumerate(lay.exhaustive) if full)
    direct = sorted(set(range(len(degrees))) - {last for _, last in closing})
    groups = []
    for degree in sorted({degrees[i] for i in direct}):
        blocks = np.array([i for i in direct if degrees[i] == degree], dtype=np.intp)
        starts = np.array([lay.offsets[i] for i in blocks], dtype=np.intp)
        groups.append((blocks, starts[:, None] + np.arange(degree, dtype=np.intp)))
    return _EncodeLayout(degrees, tuple(groups), closing)


def encode_repair(
    frame: bytes | bytearray | memoryview, plan: FecPlan, seed: int, *, block_bytes: int = BLOCK_BYTES
) -> list[bytes]:
    """The repair blocks of a frame (each ``block_bytes`` long), in send order.

    >>> blocks = encode_repair(b"\\x01" * 1500, FecPlan(1, 2, 2), seed=0, block_bytes=1024)
    >>> len(blocks), len(blocks[0])
    (1, 1024)
    """
    n = block_count(len(frame), block_bytes)
    plan.check(n)
    if plan.repair_blocks == 0 or n == 0:
        return []
    data = np.frombuffer(frame, dtype=np.uint8)
    if len(data) != n * block_bytes:
        padded = np.zeros(n * block_bytes, dtype=np.uint8)
        padded[: len(data)] = data
        data = padded
    words = _word_view(data, n, block_bytes)
    enc = _encode_layout(n, plan)
    picks = np.array(select(seed, n, enc.degrees).picks, dtype=np.intp)
    out = np.empty((plan.repair_blocks, words.shape[1]), dtype=words.dtype)
    for blocks, positions in enc.groups:
        out[blocks] = np.bitwise_xor.reduce(words[picks[positions]], axis=1)
    # The last block of a round that drew every data block is the frame parity XOR
    # the round's other blocks: for the reference's mirrored pairs this halves the work.
    if enc.closing:
        parity = np.bitwise_xor.reduce(words, axis=0)
        for first, last in enc.closing:
            if first == last:
                out[last] = parity
            elif last == first + 1:
                np.bitwise_xor(parity, out[first], out=out[last])
            else:
                np.bitwise_xor(parity, np.bitwise_xor.reduce(out[first:last], axis=0), out=out[last])
    raw = out.tobytes()
    return [raw[i : i + block_bytes] for i in range(0, len(raw), block_bytes)]


def split_data(frame: bytes | bytearray | memoryview, *, block_bytes: int = BLOCK_BYTES) -> list[memoryview]:
    """The data blocks of a frame as views (the last one short, not padded)."""
    view = memoryview(frame)
    return [view[i : i + block_bytes] for i in range(0, len(view), block_bytes)]


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def peel(rows: list[int], unknowns: int) -> list[int] | None:
    """Solve by peeling only.  ``rows[i]`` is repair row ``i``'s bitmask over the unknowns.

    Returns, per unknown, the bitmask of rows whose XOR (after removing known
    blocks) equals it; ``None`` when peeling stalls before all are found.
    """
    masks = list(rows)
    combos = [1 << i for i in range(len(rows))]
    solved: list[int] = [0] * unknowns
    left = unknowns
    progress = True
    while left and progress:
        progress = False
        for i, m in enumerate(masks):
            if m and not m & (m - 1):
                p = m.bit_length() - 1
                c = combos[i]
                solved[p] = c
                left -= 1
                progress = True
                for k, mk in enumerate(masks):
                    if mk & m:
                        masks[k] = mk ^ m
                        combos[k] ^= c
    return solved if left == 0 else None


def eliminate(rows: list[int], unknowns: int) -> list[int] | None:
    """Solve by Gauss–Jordan elimination over GF(2); same contract as :func:`peel`."""
    masks = list(rows)
    combos = [1 << i for i in range(len(rows))]
    solved: list[int] = [0] * unknowns
    free = list(range(len(rows)))
    for p in range(unknowns):
        bit = 1 << p
        # The sparsest candidate keeps the combinations (and so the XOR work) small.
        best = -1
        for i in free:
            if masks[i] & bit and (best < 0 or masks[i].bit_count() < masks[best].bit_count()):
                best = i
        if best < 0:
            return None
        free.remove(best)
        m, c = masks[best], combos[best]
        for k in range(len(masks)):
            if k != best and masks[k] & bit:
                masks[k] ^= m
                combos[k] ^= c
    for i, m in enumerate(masks):
        if m and not m & (m - 1):
            solved[m.bit_length() - 1] = combos[i]
    return solved


class FrameDecoder:
    """Rebuilds one frame from any subset of its data and repair blocks, in any order.

    Driven by the reassembler (or a test harness): call :meth:`add_data` /
    :meth:`add_repair` as blocks arrive; each returns ``True`` once the frame is
    complete, after which :meth:`frame` gives it byte-exact.  Blocks that cannot
    belong to the frame raise :class:`FecError` and change nothing.

    ``eliminate=False`` restricts recovery to peeling, i.e. what a native
    PyroFling receiver can do (used by the bench for comparison).
    """

    def __init__(
        self,
        frame_bytes: int,
        plan: FecPlan,
        seed: int,
        *,
        block_bytes: int = BLOCK_BYTES,
        eliminate: bool = True,
    ) -> None:
        self.frame_bytes = frame_bytes
        self.block_bytes = block_bytes
        self.data_blocks = block_count(frame_bytes, block_bytes)
        plan.check(self.data_blocks)
        self.plan = plan
        self.seed = seed
        self.use_elimination = eliminate
        self._buf = bytearray(self.data_blocks * block_bytes)
        self._have = bytearray(self.data_blocks)
        self._missing = self.data_blocks
        self._repair: dict[int, bytes] = {}
        self._selections: Selections | None = None
        self._unknown: list[int] | None = None  # missing blocks the cached rows refer to
        self._rows: dict[int, int] = {}  # repair index -> bitmask over self._unknown
        #: True when the frame needed repair blocks to complete.
        self.recovered = False

    @property
    def complete(self) -> bool:
        return self._missing == 0

    @property
    def missing_blocks(self) -> int:
        return self._missing

    def add_data(self, index: int, payload: bytes | bytearray | memoryview) -> bool:
        """A data block arrived.  A short payload is zero-padded (only the last block is short)."""
        if not 0 <= index < self.data_blocks:
            raise FecError(f"data block {index} outside 0..{self.data_blocks - 1}")
        if len(payload) > self.block_bytes:
            raise FecError(f"data block of {len(payload)} bytes is larger than {self.block_bytes}")
        if self._missing == 0 or self._have[index]:
            return self._missing == 0
        start = index * self.block_bytes
        self._buf[start : start + len(payload)] = payload
        # The buffer starts zeroed and a block is written once, so short blocks are already padded.
        self._have[index] = 1
        self._missing -= 1
        if self._missing and self._repair and self._missing <= len(self._repair):
            self._solve()
        return self._missing == 0

    def add_repair(self, index: int, payload: bytes | bytearray | memoryview) -> bool:
        """A repair block arrived; it must be exactly one block long."""
        if not 0 <= index < self.plan.repair_blocks:
            raise FecError(f"repair block {index} outside 0..{self.plan.repair_blocks - 1}")
        if len(payload) != self.block_bytes:
            raise FecError(f"repair block of {len(payload)} bytes, expected {self.block_bytes}")
        if self._missing == 0 or index in self._repair:
            return self._missing == 0
        self._repair[index] = bytes(payload)
        if self._missing <= len(self._repair):
            self._solve()
        return self._missing == 0

    def frame(self) -> bytes:
        """The rebuilt frame; only valid once :attr:`complete`."""
        if self._missing:
            raise FecError(f"frame incomplete: {self._missing} blocks missing")
        return bytes(memoryview(self._buf)[: self.frame_bytes])

    def _solve(self) -> None:
        """Try to rebuild the missing blocks from the repair blocks received so far.

        Symbolic first: each repair row is a bitmask over the missing blocks, kept
        across calls (rebuilt only when a data block arrived since).  Block data
        is touched only once a solution exists.
        """
        if self._selections is None:
            self._selections = select(self.seed, self.data_blocks, tuple(self.plan.degrees()))
        sel = self._selections
        if self._missing == 1:
            # Common case: one loss, any repair block that covers it reveals it.
            lost = self._have.index(0)
            for r in self._repair:
                members = sel.block(r)
                if lost in members:
                    self._apply([lost], [[r]])
                    return
            return
        if self._unknown is None or len(self._unknown) != self._missing:
            self._unknown = [i for i, h in enumerate(self._have) if not h]
            self._rows = {}
        position = {b: p for p, b in enumerate(self._unknown)}
        for r in self._repair:
            if r not in self._rows:
                mask = 0
                for b in sel.block(r):
                    p = position.get(b)
                    if p is not None:
                        mask |= 1 << p
                self._rows[r] = mask
        ids = list(self._rows)
        rows = list(self._rows.values())
        solution = peel(rows, len(self._unknown))
        if solution is None and self.use_elimination:
            solution = eliminate(rows, len(self._unknown))
        if solution is not None:
            self._apply(self._unknown, [[ids[i] for i in _bits(combo)] for combo in solution])

    def _apply(self, lost: list[int], combos: list[list[int]]) -> None:
        """Write each lost block as the XOR of its repair rows and their known members."""
        assert self._selections is not None
        sel = self._selections
        words = _word_view(np.frombuffer(self._buf, dtype=np.uint8), self.data_blocks, self.block_bytes)
        lost_set = set(lost)
        values = []
        for used in combos:
            # Known data blocks that appear an odd number of times among the used rows.
            odd: set[int] = set()
            for r in used:
                odd.symmetric_difference_update(sel.block(r))
            known = [b for b in odd if b not in lost_set]
            value = np.frombuffer(self._repair[used[0]], dtype=words.dtype).copy()
            for r in used[1:]:
                value ^= np.frombuffer(self._repair[r], dtype=words.dtype)
            if known:
                value ^= np.bitwise_xor.reduce(words[known], axis=0)
            values.append(value)
        for index, value in zip(lost, values, strict=False):
            words[index] = value
            self._have[index] = 1
        self._missing = 0
        self.recovered = True
