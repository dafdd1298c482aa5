"""Reed–Solomon repair between pyrofling peers (protocol.md §7.8): any ``n`` of a group's blocks rebuild it.

The mirrored-XOR code of §5 gives about F/2 + 1 independent equations for F
repair blocks; an MDS code gives F.  Two pyrofling peers that negotiated
``MDS_FEC`` mark such a packet with both XOR degrees 0 in its header (a plan the
reference never sends).  The code is zfec's systematic Reed–Solomon over
GF(2⁸) (a well-kept C library; k + m ≤ 256 per code), so a packet is cut into
*groups*: ``ceil(n / MAX_GROUP_DATA)`` (100) of them, data block ``i`` and repair
block ``j`` in group ``i mod G`` and ``j mod G`` (interleaved, so a burst is spread
over every group).  Within a group, repair block number ``r`` (its rank among the
group's repair blocks) is zfec's share ``k + r``.  Repair blocks are always
1024 bytes, the last data block zero-padded, as in §5.3.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import zfec

from pyrofling.fec.codec import BLOCK_BYTES, FecError, FecPlan, block_count, check_mds, group_count, leading_bytes
from pyrofling.wire import Buffer


def mds_plan(repair_blocks: int) -> FecPlan:
    """The header fields of a Reed–Solomon packet: F repair blocks, both degrees 0."""
    return FecPlan(repair_blocks, 0, 0)


# A few recent codes are kept: making one costs 3 µs (k = 20) to 1 ms (k = 100, m = 256), keeping one up to
# ~70 KB, and a forged header must not make a viewer keep hundreds.
@lru_cache(maxsize=16)
def _encoder(k: int, m: int) -> Any:
    return zfec.Encoder(k, m)


@lru_cache(maxsize=16)
def _decoder(k: int, m: int) -> Any:
    return zfec.Decoder(k, m)


def _members(count: int, groups: int, group: int) -> range:
    return range(group, count, groups)


def encode_mds_repair(frame: Buffer, repair_blocks: int) -> list[bytes]:
    """The F repair blocks of a frame, in wire order (repair index 0…F−1)."""
    view = memoryview(frame)
    n = block_count(len(view))
    check_mds(n, repair_blocks)
    padded = bytes(view) + bytes(n * BLOCK_BYTES - len(view))
    blocks = [padded[i * BLOCK_BYTES : (i + 1) * BLOCK_BYTES] for i in range(n)]
    groups = group_count(n)
    out: list[bytes] = [b""] * repair_blocks
    for g in range(groups):
        data = [blocks[i] for i in _members(n, groups, g)]
        repair_ids = list(_members(repair_blocks, groups, g))
        if not repair_ids:
            continue
        k = len(data)
        shares = _encoder(k, k + len(repair_ids)).encode(data, list(range(k, k + len(repair_ids))))
        for j, share in zip(repair_ids, shares, strict=True):
            out[j] = bytes(share)
    return out


class MdsFrameDecoder:
    """The Reed–Solomon counterpart of :class:`~pyrofling.fec.codec.FrameDecoder`, with the same interface."""

    def __init__(self, frame_bytes: int, repair_blocks: int) -> None:
        self.frame_bytes = frame_bytes
        self.data_blocks = n = block_count(frame_bytes)
        check_mds(n, repair_blocks)
        self.plan = mds_plan(repair_blocks)
        self.groups = group_count(n)
        self._buf = bytearray(n * BLOCK_BYTES)
        self._have = bytearray(n)
        self._missing = n
        self._group_missing = [len(_members(n, self.groups, g)) for g in range(self.groups)]
        self._repair: list[dict[int, bytes]] = [{} for _ in range(self.groups)]
        self.recovered = False

    @property
    def complete(self) -> bool:
        return self._missing == 0

    @property
    def missing_blocks(self) -> int:
        return self._missing

    def blocks_needed(self) -> int:
        """Blocks still needed: in each group, its missing data blocks less the repair blocks it holds."""
        return sum(max(0, m - len(r)) for m, r in zip(self._group_missing, self._repair, strict=True))

    def wanted(self) -> list[int]:
        """Data blocks to ask for (NACK): in each group, as many missing ones as its repair blocks cannot cover."""
        out: list[int] = []
        for g in range(self.groups):
            short = self._group_missing[g] - len(self._repair[g])
            if short > 0:
                missing = [i for i in _members(self.data_blocks, self.groups, g) if not self._have[i]]
                out += missing[:short]
        return sorted(out)

    def add_data(self, index: int, payload: Buffer) -> bool:
        if not 0 <= index < self.data_blocks:
            raise FecError(f"data block {index} outside 0..{self.data_blocks - 1}")
        if len(payload) > BLOCK_BYTES:
            raise FecError(f"data block of {len(payload)} bytes is larger than {BLOCK_BYTES}")
        if self._missing == 0 or self._have[index]:
            return self._missing == 0
        start = index * BLOCK_BYTES
        self._buf[start : start + len(payload)] = payload
        self._have[index] = 1
        self._missing -= 1
        g = index % self.groups
        self._group_missing[g] -= 1
        self._try(g)
        return self._missing == 0

    def add_repair(self, index: int, payload: Buffer) -> bool:
        if not 0 <= index < self.plan.repair_blocks:
            raise FecError(f"repair block {index} outside 0..{self.plan.repair_blocks - 1}")
        if len(payload) != BLOCK_BYTES:
            raise FecError(f"repair block of {len(payload)} bytes, expected {BLOCK_BYTES}")
        g = index % self.groups
        if self._missing == 0 or self._group_missing[g] == 0:
            return self._missing == 0
        self._repair[g][index // self.groups] = bytes(payload)
        self._try(g)
        return self._missing == 0

    def frame(self) -> bytes:
        if self._missing:
            raise FecError(f"frame incomplete: {self._missing} blocks missing")
        return bytes(memoryview(self._buf)[: self.frame_bytes])

    def prefix(self) -> tuple[bytearray, int]:
        """The frame's buffer, and how many of its first bytes are in hand (its leading data blocks)."""
        return leading_bytes(self._buf, self._have, self.frame_bytes, BLOCK_BYTES)

    def _try(self, g: int) -> None:
        missing = self._group_missing[g]
        repair = self._repair[g]
        if missing == 0 or missing > len(repair):
            return
        members = list(_members(self.data_blocks, self.groups, g))
        k = len(members)
        f = len(_members(self.plan.repair_blocks, self.groups, g))
        shares: list[bytes] = []
        numbers: list[int] = []
        view = memoryview(self._buf)
        for local, i in enumerate(members):
            if self._have[i]:
                shares.append(bytes(view[i * BLOCK_BYTES : (i + 1) * BLOCK_BYTES]))
                numbers.append(local)
        for rank, block in repair.items():
            if len(shares) == k:
                break
            shares.append(block)
            numbers.append(k + rank)
        rebuilt = _decoder(k, k + f).decode(shares, numbers)
        for local, i in enumerate(members):
            if not self._have[i]:
                self._buf[i * BLOCK_BYTES : (i + 1) * BLOCK_BYTES] = rebuilt[local]
                self._have[i] = 1
                self._missing -= 1
        self._group_missing[g] = 0
        repair.clear()
        self.recovered = True
