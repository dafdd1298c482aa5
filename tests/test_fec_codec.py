"""The codec: recovered frames are byte-identical, over thousands of random loss patterns."""

import itertools
import os
import random

import pytest

from pyrofling.fec import (
    FecError,
    FecPlan,
    FrameDecoder,
    encode_repair,
    reference_plan,
    repair_selections,
    split_data,
    tuned_plan,
)
from pyrofling.fec.codec import eliminate, peel


def _xor(blocks: list[bytes]) -> bytes:
    out = bytearray(len(blocks[0]))
    for b in blocks:
        for i, v in enumerate(b):
            out[i] ^= v
    return bytes(out)


def test_repair_blocks_are_the_xor_of_their_selection() -> None:
    frame = os.urandom(9 * 64 - 17)
    plan = FecPlan(3, 4, 5)
    repair = encode_repair(frame, plan, 123456789, block_bytes=64)
    padded = frame.ljust(9 * 64, b"\0")
    blocks = [padded[i : i + 64] for i in range(0, len(padded), 64)]
    for block, picks in zip(repair, repair_selections(123456789, 9, plan.degrees()), strict=True):
        assert block == _xor([blocks[i] for i in picks])


@pytest.mark.parametrize("k", [1, 3, 8, 9, 20, 40, 129, 200])
def test_encoder_agrees_with_naive_xor_for_every_planner(k: int) -> None:
    rng = random.Random(k)
    frame = rng.randbytes(k * 32 - rng.randrange(32))
    f = k // 4 + 1
    for plan in (reference_plan(k, f), tuned_plan(k, f), FecPlan(f, max(1, k // 3), max(1, k - k // 3))):
        seed = rng.getrandbits(32)
        padded = frame.ljust(k * 32, b"\0")
        blocks = [padded[i : i + 32] for i in range(0, len(padded), 32)]
        expected = [_xor([blocks[i] for i in p]) for p in repair_selections(seed, k, plan.degrees())]
        assert encode_repair(frame, plan, seed, block_bytes=32) == expected


def _decode(
    frame: bytes, plan: FecPlan, seed: int, lost: set[int], order: list[int], bb: int, elim: bool
) -> bytes | None:
    data = split_data(frame, block_bytes=bb)
    repair = encode_repair(frame, plan, seed, block_bytes=bb)
    packets = list(enumerate(data)) + [(len(data) + j, r) for j, r in enumerate(repair)]
    dec = FrameDecoder(len(frame), plan, seed, block_bytes=bb, eliminate=elim)
    for idx in order:
        if idx in lost:
            continue
        i, block = packets[idx]
        done = dec.add_data(i, block) if i < len(data) else dec.add_repair(i - len(data), block)
        if done:
            return dec.frame()
    return None


@pytest.mark.slow
def test_thousands_of_random_loss_patterns_are_byte_exact() -> None:
    rng = random.Random(5)
    recovered = failed = 0
    for trial in range(3000):
        k = rng.choice([2, 5, 9, 20, 33, 40, 100])
        bb = rng.choice([8, 16, 24])
        frame = rng.randbytes(k * bb - rng.randrange(bb))
        f = rng.randint(1, k // 2 + 2)
        plan = rng.choice([reference_plan(k, f), tuned_plan(k, f)])
        lost = set(rng.sample(range(k + f), rng.randint(1, f)))
        order = list(range(k + f))
        if trial % 2:
            rng.shuffle(order)  # any arrival order
        out = _decode(frame, plan, rng.getrandbits(32), lost, order, bb, elim=True)
        if out is None:
            failed += 1
        else:
            assert out == frame
            recovered += 1
    assert recovered > 2000  # most patterns within the repair budget are recoverable
    assert failed > 0  # and the test does exercise unrecoverable ones


def test_single_loss_always_recovered_with_reference_plans() -> None:
    rng = random.Random(1)
    for k in (1, 5, 8, 9, 20, 40, 100, 200):
        frame = rng.randbytes(k * 8)
        plan = reference_plan(k)
        for lost in rng.sample(range(k), min(k, 10)):
            assert (
                _decode(frame, plan, rng.getrandbits(32), {lost}, list(range(k + plan.repair_blocks)), 8, False)
                == frame
            )


def test_elimination_recovers_what_peeling_cannot() -> None:
    # Rows x0+x1, x1+x2, x0+x1+x2: no row has one unknown, but the system is solvable.
    rows = [0b011, 0b110, 0b111]
    assert peel(rows, 3) is None
    solution = eliminate(rows, 3)
    assert solution is not None
    for p, combo in enumerate(solution):
        acc = 0
        for i in range(3):
            if combo >> i & 1:
                acc ^= rows[i]
        assert acc == 1 << p


def test_rank_ceiling_of_mirrored_pairs() -> None:
    # Each mirrored pair repeats the frame parity: with F=6 at K=20 no decoder rebuilds 5 lost data blocks.
    rng = random.Random(3)
    frame = rng.randbytes(20 * 8)
    plan = reference_plan(20)
    for _ in range(200):
        lost = set(rng.sample(range(20), 5))
        assert _decode(frame, plan, rng.getrandbits(32), lost, list(range(26)), 8, True) is None


def test_elimination_never_does_worse_than_peeling() -> None:
    rng = random.Random(9)
    wins = 0
    for _ in range(400):
        k = 40
        frame = rng.randbytes(k * 8)
        plan = FecPlan(11, 24, 24)
        seed = rng.getrandbits(32)
        lost = set(rng.sample(range(k), 6))
        order = list(range(k + 11))
        peeled = _decode(frame, plan, seed, lost, order, 8, False)
        full = _decode(frame, plan, seed, lost, order, 8, True)
        if peeled is not None:
            assert full == frame
        wins += peeled is None and full is not None
    assert wins > 0


def test_decoder_rejects_blocks_that_cannot_belong() -> None:
    frame = os.urandom(3000)
    plan = FecPlan(2, 2, 1)
    dec = FrameDecoder(len(frame), plan, 7)
    for bad in (
        lambda: dec.add_data(3, b"x"),
        lambda: dec.add_data(-1, b"x"),
        lambda: dec.add_data(0, b"x" * 1025),
        lambda: dec.add_repair(2, b"\0" * 1024),
        lambda: dec.add_repair(0, b"\0" * 1000),
    ):
        with pytest.raises(FecError):
            bad()
    with pytest.raises(FecError):
        dec.frame()
    assert dec.missing_blocks == 3


@pytest.mark.parametrize("plan", [FecPlan(1, 0, 1), FecPlan(1, 5, 5), FecPlan(1, 256, 256), FecPlan(-1, 1, 1)])
def test_bad_plans_are_refused(plan: FecPlan) -> None:
    with pytest.raises(FecError):
        FrameDecoder(4 * 1024, plan, 0)


def test_duplicates_and_late_blocks_are_harmless() -> None:
    frame = os.urandom(5 * 1024)
    plan = reference_plan(5)
    repair = encode_repair(frame, plan, 42)
    data = split_data(frame)
    dec = FrameDecoder(len(frame), plan, 42)
    for i, block in itertools.chain(enumerate(data[:3]), enumerate(data[:3])):
        assert not dec.add_data(i, block)
    assert not dec.add_data(4, data[4])
    assert dec.add_repair(0, repair[0])  # recovers block 3
    assert dec.recovered
    assert dec.add_data(3, data[3])  # late original: still complete
    assert dec.frame() == frame


def test_no_fec_and_empty_frames() -> None:
    assert encode_repair(b"abc", FecPlan(0, 0, 0), 1) == []
    dec = FrameDecoder(3, FecPlan(0, 0, 0), 1)
    assert dec.add_data(0, b"abc")
    assert dec.frame() == b"abc"


def test_batch_decode_agrees_with_the_incremental_decoder() -> None:
    from pyrofling.fec import decode_frame

    rng = random.Random(21)
    for _ in range(1500):
        k = rng.choice([1, 4, 9, 20, 37, 100])
        bb = 16
        frame = rng.randbytes(k * bb - rng.randrange(bb))
        f = rng.randint(1, k // 3 + 2)
        plan = rng.choice([reference_plan(k, f), tuned_plan(k, f)])
        seed = rng.getrandbits(32)
        data = split_data(frame, block_bytes=bb)
        repair = encode_repair(frame, plan, seed, block_bytes=bb)
        lost = set(rng.sample(range(k + f), rng.randint(0, f + 1)))
        got_data = {i: bytes(b) for i, b in enumerate(data) if i not in lost}
        got_repair = {j: r for j, r in enumerate(repair) if k + j not in lost}
        batch = decode_frame(len(frame), plan, seed, got_data, got_repair, block_bytes=bb)
        inc = _decode(frame, plan, seed, lost, list(range(k + f)), bb, True)
        assert batch == inc
        assert batch is None or batch == frame


def test_batch_decode_rejects_blocks_that_cannot_belong() -> None:
    from pyrofling.fec import decode_frame

    frame = os.urandom(2500)  # blocks of 1024, 1024, 452
    plan = FecPlan(1, 3, 3)
    good = {0: frame[:1024], 1: frame[1024:2048]}
    for data, repair in (
        ({**good, 2: frame[2048:] + b"x"}, {}),  # last block too long
        ({0: frame[:1000], 1: frame[1000:2048]}, {}),  # lengths that add up but misalign
        ({**good, 3: b"x"}, {}),  # index out of range
        (good, {1: bytes(1024)}),  # repair index out of range
        (good, {0: bytes(10)}),  # short repair block
    ):
        with pytest.raises(FecError):
            decode_frame(len(frame), plan, 1, data, repair)
    assert decode_frame(len(frame), plan, 1, good, {}) is None
