"""How fast the codecs encode and decode: 1024-byte blocks, single thread, median of many frames.

Ours (the mirrored-XOR codec, in one call and fed a datagram at a time as the
viewer's reassembler does) and the optional peers (:mod:`.fec_peers`), with 0, 1
and 2 lost data blocks.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pyrofling.bench.fec_peers import Raptorq, Zfec
from pyrofling.fec.codec import FecPlan, FrameDecoder, decode_frame, encode_repair, split_data
from pyrofling.fec.mds import MdsFrameDecoder, encode_mds_repair


@dataclass(slots=True)
class Throughput:
    encode_MBps: float | None = None
    #: Lost data blocks -> MB/s, decoding from the blocks that arrived in one call (as zfec/raptorq do).
    decode_MBps: dict[int, float | None] = field(default_factory=dict)
    #: The same, fed one datagram at a time into FrameDecoder, as the viewer's reassembler does.
    incremental_decode_MBps: dict[int, float | None] = field(default_factory=dict)


def median_rate(k: int, fn: Callable[[int], object], frames: int) -> float:
    """MB/s of payload (1 MB = 1e6 B) from the median time of ``frames`` calls."""
    times = []
    for i in range(frames):
        t0 = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t0)
    return k * 1024 / statistics.median(times) / 1e6


def lost_sets(k: int, losses: int, frames: int) -> list[set[int]]:
    return [set(random.Random(i).sample(range(k), min(losses, k))) for i in range(frames)]


def mds_throughput(frame: bytes, repair_blocks: int, frames: int) -> Throughput:
    """Encode and decode speed of the negotiated Reed–Solomon code (protocol.md §7.8), fed one datagram at a
    time as the viewer's reassembler does (so both decode columns are that)."""
    k = -(-len(frame) // 1024)
    data = split_data(frame)
    tp = Throughput(encode_MBps=median_rate(k, lambda _i: encode_mds_repair(frame, repair_blocks), frames))
    repair = encode_mds_repair(frame, repair_blocks)
    for losses in (0, 1, 2):
        if losses > repair_blocks:
            tp.decode_MBps[losses] = tp.incremental_decode_MBps[losses] = None
            continue
        lost_per_frame = lost_sets(k, losses, frames)

        def incremental(i: int, lost_per_frame: list[set[int]] = lost_per_frame) -> None:
            dec = MdsFrameDecoder(len(frame), repair_blocks)
            lost = lost_per_frame[i]
            for j, data_block in enumerate(data):
                if j not in lost:
                    dec.add_data(j, data_block)
            for j, repair_block in enumerate(repair):
                if dec.complete or dec.add_repair(j, repair_block):
                    break
            dec.frame()

        tp.decode_MBps[losses] = tp.incremental_decode_MBps[losses] = median_rate(k, incremental, frames)
    return tp


def xor_throughput(frame: bytes, plan: FecPlan, seeds: list[int]) -> Throughput:
    """Encode and decode speed of the mirrored-XOR codec for one plan, fresh seed per frame."""
    k = -(-len(frame) // 1024)
    data = split_data(frame)
    frames = len(seeds)
    tp = Throughput()
    repairs: list[list[bytes]] = [[] for _ in seeds]
    if plan.repair_blocks:
        tp.encode_MBps = median_rate(k, lambda i: encode_repair(frame, plan, seeds[i]), frames)
        repairs = [encode_repair(frame, plan, s) for s in seeds]
    repair_maps = [dict(enumerate(r)) for r in repairs]
    for losses in (0, 1, 2):
        if losses and losses > plan.repair_blocks:
            tp.decode_MBps[losses] = tp.incremental_decode_MBps[losses] = None
            continue
        lost_per_frame = lost_sets(k, losses, frames)
        received = [{j: bytes(b) for j, b in enumerate(data) if j not in lost} for lost in lost_per_frame]

        def batch(i: int, received: list[dict[int, bytes]] = received) -> None:
            decode_frame(len(frame), plan, seeds[i], received[i], repair_maps[i])

        def incremental(i: int, lost_per_frame: list[set[int]] = lost_per_frame) -> None:
            dec = FrameDecoder(len(frame), plan, seeds[i])
            lost = lost_per_frame[i]
            for j, data_block in enumerate(data):
                if j not in lost:
                    dec.add_data(j, data_block)
            if not dec.complete:
                for j, repair_block in enumerate(repairs[i]):
                    if dec.add_repair(j, repair_block):
                        break
            if dec.complete:
                dec.frame()

        # A frame the code cannot repair still costs its attempt: that is the decoder's real cost.
        tp.decode_MBps[losses] = median_rate(k, batch, frames)
        tp.incremental_decode_MBps[losses] = median_rate(k, incremental, frames)
    return tp


def zfec_throughput(frame: bytes, f: int, frames: int) -> Throughput:
    k = -(-len(frame) // 1024)
    zf = Zfec()
    blocks = [bytes(b) for b in split_data(frame)]
    tp = Throughput(encode_MBps=median_rate(k, lambda i: zf.encode(blocks, f), frames))
    everything = list(enumerate(blocks + zf.encode(blocks, f)))
    for losses in (0, 1, 2):
        if losses > f:
            tp.decode_MBps[losses] = None
            continue
        received = [[(j, b) for j, b in everything if j not in lost] for lost in lost_sets(k, losses, frames)]
        tp.decode_MBps[losses] = median_rate(k, lambda i, r=received: zf.decode(k, f, r[i]), frames)  # type: ignore[misc]
    return tp


def raptorq_throughput(frame: bytes, f: int, frames: int) -> Throughput:
    k = -(-len(frame) // 1024)
    rq = Raptorq()
    frames = max(20, frames // 5)  # one Encoder and Decoder per frame: slow, fewer samples
    tp = Throughput(encode_MBps=median_rate(k, lambda i: rq.encode(frame, 1024, f), frames))
    packets = rq.encode(frame, 1024, f)
    for losses in (0, 1, 2):
        if losses > f:
            tp.decode_MBps[losses] = None
            continue
        survivors = [[p for j, p in enumerate(packets) if j not in lost] for lost in lost_sets(k, losses, frames)]
        tp.decode_MBps[losses] = median_rate(k, lambda i, s=survivors: rq.decode(len(frame), 1024, s[i]), frames)  # type: ignore[misc]
    return tp
