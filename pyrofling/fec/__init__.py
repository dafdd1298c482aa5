"""Mirrored-XOR fountain FEC, bit-compatible with PyroFling (protocol.md §5).

The codec on its own, for test harnesses::

    from pyrofling.fec import FecPlan, FrameDecoder, encode_repair, split_data, tuned_plan

    plan = tuned_plan(data_blocks=20, repair_blocks=6)
    repair = encode_repair(frame, plan, seed)            # list of 1024-byte blocks
    dec = FrameDecoder(len(frame), plan, seed)
    for i, block in received_data: dec.add_data(i, block)    # any subset, any order
    for j, block in received_repair: dec.add_repair(j, block)
    frame_back = dec.frame() if dec.complete else None   # byte-exact, or not recoverable

    # or in one call, with whichever blocks arrived:
    frame_back = decode_frame(len(frame), plan, seed, {i: block, ...}, {j: block, ...})
"""

from pyrofling.fec.codec import (
    BLOCK_BYTES,
    NO_FEC,
    FecError,
    FecPlan,
    FrameDecoder,
    block_count,
    decode_frame,
    encode_repair,
    seed_for_pts,
    split_data,
)
from pyrofling.fec.planner import (
    PLANNERS,
    AdaptivePlanner,
    FecPlanner,
    ReferencePlanner,
    TunedPlanner,
    make_planner,
    reference_plan,
    repair_count,
    tuned_plan,
)
from pyrofling.fec.shuffle import repair_selections

__all__ = [
    "BLOCK_BYTES",
    "NO_FEC",
    "PLANNERS",
    "AdaptivePlanner",
    "FecError",
    "FecPlan",
    "FecPlanner",
    "FrameDecoder",
    "ReferencePlanner",
    "TunedPlanner",
    "block_count",
    "decode_frame",
    "encode_repair",
    "make_planner",
    "reference_plan",
    "repair_count",
    "repair_selections",
    "seed_for_pts",
    "split_data",
    "tuned_plan",
]
