"""When the viewer's audio starts, skips and conceals (pyrofling.core.viewer.audio_playout), in virtual time."""

from __future__ import annotations

import pytest

from pyrofling.core.viewer.audio_control import DriftController
from pyrofling.core.viewer.audio_playout import AudioPlayout, Pace, Prime

RATE = 48_000
CHUNK = 240  # 5 ms
TARGET = 0.030


def playout() -> AudioPlayout:
    p = AudioPlayout(DriftController(TARGET), max_excess_s=0.060)
    p.configure(RATE)
    return p


def test_playback_starts_at_the_target_counting_the_devices_latency_and_trims_what_piled_up() -> None:
    p = playout()
    p.decoded(CHUNK)
    # The device has not called back (its latency is unknown), or more packets wait: not yet.
    assert p.prime(more_waiting=False, latency_s=None, level=10_000, device_rate=RATE) is None
    assert p.prime(more_waiting=True, latency_s=0.010, level=10_000, device_rate=RATE) is None
    # 10 ms of the 30 are the device's own: 20 ms must be queued.
    assert p.prime(more_waiting=False, latency_s=0.010, level=959, device_rate=RATE) is None
    start = p.prime(more_waiting=False, latency_s=0.010, level=2_000, device_rate=RATE)
    assert start == Prime(trim_frames=2_000 - 960, start_level=960 + CHUNK // 2)
    assert p.playing and p.primes == 1


def started() -> AudioPlayout:
    p = playout()
    p.decoded(CHUNK)
    assert p.prime(more_waiting=False, latency_s=0.0, level=1_440, device_rate=RATE) is not None
    return p


def test_the_speed_follows_the_buffer_and_a_burst_above_the_limit_is_skipped_then_faded_in() -> None:
    p = started()
    assert p.pace(0.0, playing=True, buffered_s=None).speed == 1.0  # nothing measured yet
    assert not p.pace(0.005, playing=True, buffered_s=TARGET + 0.059).skip_excess  # within the limit
    burst = p.pace(0.010, playing=True, buffered_s=TARGET + 0.1001)
    assert burst == Pace(1.0, skip_excess=True) and p.skip == 4804  # 100.1 ms over the target
    # The skip takes 20 whole chunks, then the start of one, whose rest fades in; then audio flows as it came.
    assert [p.decoded(CHUNK) for _ in range(20)] == [(CHUNK, False)] * 20
    assert p.decoded(CHUNK) == (4, True) and p.skip == 0
    assert p.decoded(CHUNK) == (0, False)
    assert p.skipped_frames == 4804


def test_a_skip_of_whole_chunks_fades_in_the_chunk_after_it() -> None:
    p = started()
    p.pace(0.0, playing=True, buffered_s=TARGET + 0.100)  # exactly 20 chunks over
    assert [p.decoded(CHUNK) for _ in range(20)] == [(CHUNK, False)] * 20
    assert p.decoded(CHUNK) == (0, True)  # not a jump from the faded-out burst into full level


def test_a_loss_is_concealed_as_long_as_it_was_but_never_past_the_target_and_what_follows_fades_in() -> None:
    p = playout()
    p.decoded(CHUNK)
    assert p.conceal(2, playing=False, buffered_s=None) == 0  # nothing plays yet: priming waits for audio
    p = started()
    assert p.conceal(2, playing=True, buffered_s=TARGET - 0.010) == 2 * CHUNK
    assert p.decoded(CHUNK) == (0, True)
    # A long outage at the target: one chunk's worth at most, the buffer never grows past it.
    assert p.conceal(40, playing=True, buffered_s=TARGET) == CHUNK
    assert p.conceal(40, playing=True, buffered_s=TARGET + 0.010) == 0
    assert p.concealed_frames == 3 * CHUNK


def test_an_underrun_primes_again() -> None:
    p = started()
    assert p.pace(0.0, playing=False, buffered_s=None) == Pace(1.0)  # the callback ran dry
    assert not p.playing
    assert p.prime(more_waiting=False, latency_s=0.0, level=1_440, device_rate=RATE) is not None
    assert p.primes == 2


@pytest.mark.parametrize("buffered_ms", [20.0, 40.0])
def test_the_rate_controller_speeds_up_above_the_target_and_slows_below(buffered_ms: float) -> None:
    p = started()
    speeds = [p.pace(t * 0.005, playing=True, buffered_s=buffered_ms / 1000).speed for t in range(400)]
    assert (speeds[-1] > 1.0) == (buffered_ms > TARGET * 1000)
