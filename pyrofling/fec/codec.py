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

from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from itertools import repeat
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from pyrofling.fec.shuffle import Selections, layout, select

BLOCK_BYTES = 1024
#: Largest degree the header can carry (u8 fields).
MAX_DEGREE = 255
#: Largest repair index the 14-bit subpacket field can carry.
MAX_REPAIR_BLOCKS = 1 << 14


#: Anything a block may arrive as.
Buffer: TypeAlias = bytes | bytearray | memoryview


class FecError(ValueError):
    """A plan, index or block that cannot belong to this frame."""


@dataclass(frozen=True, slots=True)
class FecPlan:
    """How many repair blocks a frame gets and the XOR degree of even/odd ones."""

    repair_blocks: int
    degree_even: int
    degree_odd: int

    @property
    def mds(self) -> bool:
        """Reed–Solomon repair (both degrees 0, protocol.md §7.8): only between pyrofling peers that negotiated it."""
        return self.repair_blocks > 0 and self.degree_even == 0 and self.degree_odd == 0

    def degrees(self) -> list[int]:
        """Degree of each repair block, in order."""
        return [self.degree_odd if i & 1 else self.degree_even for i in range(self.repair_blocks)]

    def check(self, data_blocks: int) -> None:
        """Raise :class:`FecError` unless the plan is usable for a frame of ``data_blocks``."""
        if not 0 <= self.repair_blocks <= MAX_REPAIR_BLOCKS:
            raise FecError(f"{self.repair_blocks} repair blocks is out of range")
        if self.repair_blocks == 0:
            return
        if self.mds:
            check_mds(data_blocks, self.repair_blocks)
            return
        for name, degree in (("even", self.degree_even), ("odd", self.degree_odd)):
            if not 1 <= degree <= min(data_blocks, MAX_DEGREE):
                raise FecError(f"{name} degree {degree} is not in 1..{min(data_blocks, MAX_DEGREE)}")


#: Data blocks per Reed–Solomon group (protocol.md §7.8).  zfec's cost per byte grows with the repair count:
#: 100 keeps a 200-block frame's encode near 2 ms while losing 7e-10 of frames at 5 % loss and 25 % overhead
#: (groups of 48: 1.2e-4; one code: the MDS bound itself).
MAX_GROUP_DATA = 100
#: zfec's limit on the blocks of one code.
MAX_GROUP_BLOCKS = 256


def group_count(data_blocks: int) -> int:
    """Reed–Solomon groups of a packet of ``data_blocks`` (protocol.md §7.8)."""
    return max(1, -(-data_blocks // MAX_GROUP_DATA))


def max_mds_repair(data_blocks: int) -> int:
    """The most Reed–Solomon repair blocks a packet of ``data_blocks`` can have (every group within 256)."""
    groups = group_count(data_blocks)
    return groups * (MAX_GROUP_BLOCKS - -(-data_blocks // groups))


def check_mds(data_blocks: int, repair_blocks: int) -> None:
    """Raise :class:`FecError` unless every Reed–Solomon group fits zfec's 256 blocks."""
    groups = group_count(data_blocks)
    k_max = -(-data_blocks // groups)
    f_max = -(-repair_blocks // groups)
    if repair_blocks < 1 or k_max + f_max > MAX_GROUP_BLOCKS:
        raise FecError(f"{repair_blocks} Reed–Solomon repair blocks do not fit {data_blocks} data blocks")


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


def encode_repair(frame: Buffer, plan: FecPlan, seed: int, *, block_bytes: int = BLOCK_BYTES) -> list[bytes]:
    """The repair blocks of a frame (each ``block_bytes`` long), in send order.

    >>> blocks = encode_repair(b"\\x01" * 1500, FecPlan(1, 2, 2), seed=0, block_bytes=1024)
    >>> len(blocks), len(blocks[0])
    (1, 1024)
    """
    n = block_count(len(frame), block_bytes)
    plan.check(n)
    if plan.repair_blocks == 0 or n == 0:
        return []
    if n == 1:  # an audio chunk: every selection is its one block (24 µs through the arrays, 1 this way)
        return [bytes(frame).ljust(block_bytes, b"\0")] * plan.repair_blocks
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


def split_data(frame: Buffer, *, block_bytes: int = BLOCK_BYTES) -> list[memoryview]:
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


def _solve(
    sel: Selections,
    unknown: list[int],
    repair_ids: Iterable[int],
    *,
    use_elimination: bool,
    row_cache: dict[int, int] | None = None,
) -> list[list[int]] | None:
    """For each unknown data block, the repair blocks whose XOR (with known blocks) gives it.

    Rows are added in repair-index order, one pool round at a time, and a
    solution is tried after each round, so a decoder that can answer from the
    first rounds never replays the rest of the shuffler.  ``row_cache`` keeps
    each repair block's bitmask over ``unknown`` across calls.
    """
    if len(unknown) == 1:
        # Common case: one loss; the first repair block that covers it reveals it.
        lost = unknown[0]
        for r in sorted(repair_ids):
            if lost in sel.block(r):
                return [[r]]
        return None
    position = {b: p for p, b in enumerate(unknown)}
    cache = {} if row_cache is None else row_cache
    rounds = sel.layout.rounds
    ordered = sorted(repair_ids)
    ids: list[int] = []
    rows: list[int] = []
    i = 0
    while i < len(ordered):
        round_end = rounds[bisect_right(rounds, ordered[i])]
        while i < len(ordered) and ordered[i] < round_end:
            r = ordered[i]
            mask = cache.get(r)
            if mask is None:
                mask = 0
                for b in sel.block(r):
                    p = position.get(b)
                    if p is not None:
                        mask |= 1 << p
                cache[r] = mask
            if mask:
                ids.append(r)
                rows.append(mask)
            i += 1
        if len(rows) >= len(unknown):
            solution = peel(rows, len(unknown))
            if solution is None and use_elimination:
                solution = eliminate(rows, len(unknown))
            if solution is not None:
                return [[ids[j] for j in _bits(combo)] for combo in solution]
    return None


def _reconstruct(
    words: npt.NDArray[Any],
    sel: Selections,
    unknown: list[int],
    combos: list[list[int]],
    repair: Mapping[int, Buffer],
) -> None:
    """Write each unknown block: the XOR of its repair blocks and their known members."""
    if len(combos) == 1 and len(combos[0]) == 1:
        # One loss, one repair block: the repair block XOR its other members.
        index, r = unknown[0], combos[0][0]
        others = [b for b in sel.block(r) if b != index]
        value = np.frombuffer(repair[r], dtype=words.dtype)
        words[index] = np.bitwise_xor.reduce(words[others], axis=0) ^ value if others else value
        return
    lost = set(unknown)
    values = []
    for used in combos:
        # Known data blocks that appear an odd number of times among the used rows.
        odd: set[int] = set()
        for r in used:
            odd.symmetric_difference_update(sel.block(r))
        known = [b for b in odd if b not in lost]
        value = np.frombuffer(repair[used[0]], dtype=words.dtype).copy()
        for r in used[1:]:
            value ^= np.frombuffer(repair[r], dtype=words.dtype)
        if known:
            value ^= np.bitwise_xor.reduce(words[known], axis=0)
        values.append(value)
    for index, value in zip(unknown, values, strict=True):
        words[index] = value


def decode_frame(
    frame_bytes: int,
    plan: FecPlan,
    seed: int,
    data: Mapping[int, Buffer],
    repair: Mapping[int, Buffer],
    *,
    block_bytes: int = BLOCK_BYTES,
    eliminate: bool = True,
) -> bytes | None:
    """Rebuild a frame from whichever data and repair blocks arrived; ``None`` if not recoverable.

    ``data[i]`` is data block ``i`` (the last one may be short), ``repair[j]``
    repair block ``j``.  Blocks that cannot belong to the frame raise
    :class:`FecError`.  This is the one-call form of :class:`FrameDecoder`.
    """
    n = block_count(frame_bytes, block_bytes)
    plan.check(n)
    last = frame_bytes - (n - 1) * block_bytes
    _check_blocks(data, n, block_bytes, last, "data")
    _check_blocks(repair, plan.repair_blocks, block_bytes, block_bytes, "repair")
    if len(data) == n:
        return b"".join(map(data.__getitem__, range(n)))
    if n - len(data) > len(repair):
        return None
    unknown = [i for i in range(n) if i not in data]
    sel = select(seed, n, tuple(plan.degrees()))
    combos = _solve(sel, unknown, repair, use_elimination=eliminate)
    if combos is None:
        return None
    zero = bytes(block_bytes)
    buf = bytearray(b"".join(map(data.get, range(n), repeat(zero, n))))
    buf += bytes(n * block_bytes - len(buf))  # pad a short last block for the XORs
    _reconstruct(_word_view(np.frombuffer(buf, dtype=np.uint8), n, block_bytes), sel, unknown, combos, repair)
    return bytes(memoryview(buf)[:frame_bytes])


def _check_blocks(blocks: Mapping[int, Buffer], count: int, block_bytes: int, last_bytes: int, kind: str) -> None:
    """Raise :class:`FecError` unless every index is in range and every block has its exact length."""
    if not blocks:
        return
    if min(blocks) < 0 or max(blocks) >= count:
        raise FecError(f"{kind} block index outside 0..{count - 1}")
    lengths = list(map(len, blocks.values()))
    expected = block_bytes * len(blocks)
    if count - 1 in blocks:
        if len(blocks[count - 1]) != last_bytes:
            raise FecError(f"last {kind} block is {len(blocks[count - 1])} bytes, expected {last_bytes}")
        expected += last_bytes - block_bytes
    # No block is longer than a block and the total is exact, so every length is exact.
    if max(lengths) > block_bytes or sum(lengths) != expected:
        raise FecError(f"a {kind} block has the wrong length (blocks are {block_bytes} bytes)")


def leading_bytes(buf: bytearray, have: bytearray, frame_bytes: int, block_bytes: int) -> tuple[bytearray, int]:
    """``buf`` and the length of its prefix made of blocks marked in ``have`` (a frame decoder's state)."""
    missing = have.find(0)
    return buf, frame_bytes if missing < 0 else missing * block_bytes


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

    def wanted(self) -> list[int]:
        """Data blocks to ask for (NACK) so the frame surely completes: every missing one (XOR repair blocks may
        be dependent, so what they would still cover is not counted)."""
        return [i for i, h in enumerate(self._have) if not h] if self._missing else []

    def add_data(self, index: int, payload: Buffer) -> bool:
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
            self._try_repair()
        return self._missing == 0

    def add_repair(self, index: int, payload: Buffer) -> bool:
        """A repair block arrived; it must be exactly one block long."""
        if not 0 <= index < self.plan.repair_blocks:
            raise FecError(f"repair block {index} outside 0..{self.plan.repair_blocks - 1}")
        if len(payload) != self.block_bytes:
            raise FecError(f"repair block of {len(payload)} bytes, expected {self.block_bytes}")
        if self._missing == 0 or index in self._repair:
            return self._missing == 0
        self._repair[index] = bytes(payload)
        if self._missing <= len(self._repair):
            self._try_repair()
        return self._missing == 0

    def frame(self) -> bytes:
        """The rebuilt frame; only valid once :attr:`complete`."""
        if self._missing:
            raise FecError(f"frame incomplete: {self._missing} blocks missing")
        return bytes(memoryview(self._buf)[: self.frame_bytes])

    def prefix(self) -> tuple[bytearray, int]:
        """The frame's buffer, and how many of its first bytes are in hand (its leading data blocks)."""
        return leading_bytes(self._buf, self._have, self.frame_bytes, self.block_bytes)

    def _try_repair(self) -> None:
        if self._selections is None:
            self._selections = select(self.seed, self.data_blocks, tuple(self.plan.degrees()))
        if self._unknown is None or len(self._unknown) != self._missing:
            self._unknown = [i for i, h in enumerate(self._have) if not h]
            self._rows = {}
        combos = _solve(
            self._selections, self._unknown, self._repair, use_elimination=self.use_elimination, row_cache=self._rows
        )
        if combos is None:
            return
        words = _word_view(np.frombuffer(self._buf, dtype=np.uint8), self.data_blocks, self.block_bytes)
        _reconstruct(words, self._selections, self._unknown, combos, self._repair)
        for index in self._unknown:
            self._have[index] = 1
        self._missing = 0
        self.recovered = True
