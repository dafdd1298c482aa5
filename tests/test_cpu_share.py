"""The real-time encoder's share of its CPU, in virtual time: it keeps real time while its encodes leave the
host's other threads room, and steps down once, for good, when they fill more than half of a second."""

from __future__ import annotations

from pyrofling.core.cpu_share import CpuShare

PERIOD_S = 1 / 60


def run(share: CpuShare, encode_s: float, frames: int, start_s: float = 0.0) -> list[int]:
    """Encodes of ``encode_s`` at each tick; the frames after which the encoder was told to step down."""
    told = []
    for i in range(frames):
        t = start_s + i * PERIOD_S
        if share.worked(t, t + encode_s):
            told.append(i)
    return told


def test_an_encoder_using_a_quarter_of_its_cpu_keeps_real_time() -> None:
    share = CpuShare()
    assert run(share, 0.0045, 60 * 120) == []  # two minutes of the 2-core machine's 720p encodes
    assert not share.stepped_down and 0.26 < share.share(120.0) < 0.28


def test_an_encoder_filling_most_of_its_cpu_steps_down_once_within_a_second() -> None:
    share = CpuShare()
    told = run(share, 0.012, 600)  # 12 ms of a 16.7 ms period: 72 % of the CPU
    assert len(told) == 1 and told[0] < 60  # once, and before a second of it had passed
    assert share.stepped_down and share.share_at_step_down is not None and share.share_at_step_down > 0.5


def test_a_slow_start_is_a_small_part_of_a_second_not_the_whole_of_the_time_since_the_start() -> None:
    # The first encodes (the codec warming up, a key frame) may take 100 ms or more; over a whole second that is
    # not most of a CPU, though it is most of the time since the stream began.
    share = CpuShare()
    assert not share.worked(0.0, 0.15)
    assert not share.worked(0.15, 0.30)
    assert run(share, 0.004, 300, start_s=0.30) == []


def test_only_the_last_second_counts_and_an_encode_cut_by_its_start_counts_in_part() -> None:
    old = CpuShare()
    assert not old.worked(0.0, 0.45)  # 45 % of a second: not over the limit
    assert not old.worked(1.3, 1.4)  # the second up to 1.4 s holds 0.05 s of the first and all 0.1 s of this
    assert abs(old.share(1.4) - 0.15) < 1e-9
    recent = CpuShare()
    assert not recent.worked(0.0, 0.45)
    assert recent.worked(0.9, 1.0)  # within one second: 0.55 s of it
    assert not recent.worked(1.0, 1.9)  # told once only: it has stepped down for the rest of the stream
