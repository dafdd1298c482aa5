"""The audio rate controllers and the device clock, with a fake clock (no audio device)."""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

import pytest

from pyrofling.core.viewer.audio_control import (
    MAX_TRIM,
    DeviceClock,
    DriftController,
    RateController,
    ReferenceRateController,
    cents,
    make_rate_controller,
)

RATE = 48_000
CHUNK = 240  # 5 ms


@dataclass
class Run:
    times: list[float]
    buffered: list[float]
    speeds: list[float]

    def settled(self, after_s: float) -> tuple[list[float], list[float]]:
        keep = [i for i, t in enumerate(self.times) if t >= after_s]
        return [self.buffered[i] for i in keep], [self.speeds[i] for i in keep]


def simulate(
    controller: RateController,
    *,
    skew_ppm: float,
    jitter_s: float = 0.005,
    duration_s: float = 60.0,
    start_s: float = 0.03,
    seed: int = 1,
) -> Run:
    """A sender whose clock runs ``skew_ppm`` fast, a network adding uniform jitter, a device at
    exactly RATE.  Each chunk is resampled by 1/speed before it joins the buffer; the buffer is
    measured at each arrival, before the chunk joins it (what the player does)."""
    rng = random.Random(seed)
    period = CHUNK / (RATE * (1 + skew_ppm * 1e-6))
    arrivals = sorted(k * period + rng.uniform(0.0, jitter_s) for k in range(int(duration_s / period)))
    written = start_s * RATE  # frames ahead of the speaker at t = 0
    run = Run([], [], [])
    for t in arrivals:
        buffered = (written - t * RATE) / RATE
        speed = controller.update(t, buffered)
        written += CHUNK / speed
        run.times.append(t)
        run.buffered.append(buffered)
        run.speeds.append(speed)
    return run


def p99_deviation_ms(values: list[float], target: float) -> float:
    dev = sorted(abs(v - target) for v in values)
    return dev[int(0.99 * (len(dev) - 1))] * 1000


def test_reference_rule_is_proportional_and_clamped() -> None:
    c = ReferenceRateController(0.030)
    assert c.update(0.0, 0.030) == 1.0
    assert c.update(0.0, 0.040) == pytest.approx(1.0005)  # 10 ms over: 0.05 · 0.01
    assert c.update(0.0, 0.020) == pytest.approx(0.9995)
    assert c.update(0.0, 0.5) == pytest.approx(1 + MAX_TRIM)
    assert c.update(0.0, 0.0) == pytest.approx(1 - 0.0015)
    assert c.update(0.0, -1.0) == pytest.approx(1 - MAX_TRIM)


def test_reference_rule_leaves_a_skew_sized_offset() -> None:
    """Why pyrofling has its own: at +500 ppm the reference settles 10 ms above target."""
    run = simulate(ReferenceRateController(0.030), skew_ppm=500, jitter_s=0.0, duration_s=300)
    late, _ = run.settled(200)
    assert statistics.mean(late) == pytest.approx(0.040, abs=0.0005)


@pytest.mark.parametrize("skew_ppm", [-2000, -500, 0, 500, 2000])
def test_drift_controller_holds_the_target_across_skews(skew_ppm: float) -> None:
    target = 0.030
    c = DriftController(target)
    run = simulate(c, skew_ppm=skew_ppm)
    buffered, speeds = run.settled(10.0)
    assert statistics.mean(buffered) == pytest.approx(target, abs=0.0005)
    # Jitter alone is ±2.5 ms; a large skew adds a start-up excursion before it is learned.
    assert p99_deviation_ms(run.buffered, target) <= (5.0 if abs(skew_ppm) <= 500 else 8.0)
    assert p99_deviation_ms(buffered, target) <= 3.0
    assert c.skew * 1e6 == pytest.approx(skew_ppm, abs=5)
    mean_speed_ppm = (statistics.mean(speeds) - 1) * 1e6
    assert mean_speed_ppm == pytest.approx(skew_ppm, abs=15)  # includes pulling in the start-up offset
    assert statistics.pstdev(speeds) * 1e6 < 30  # wobble around the skew, ppm
    assert max(abs(s - 1) for s in run.speeds) <= MAX_TRIM + 1e-12


def test_drift_controller_wobbles_less_and_sits_closer_than_the_reference() -> None:
    for skew in (-500, 500):
        ours = simulate(DriftController(0.030), skew_ppm=skew)
        ref = simulate(ReferenceRateController(0.030), skew_ppm=skew)
        ours_b, ours_s = ours.settled(10)
        ref_b, ref_s = ref.settled(10)
        assert statistics.pstdev(ours_s) < statistics.pstdev(ref_s) / 3
        assert abs(statistics.mean(ours_b) - 0.030) < abs(statistics.mean(ref_b) - 0.030) / 5


def test_drift_controller_without_jitter_or_skew_does_nothing() -> None:
    c = DriftController(0.030)
    run = simulate(c, skew_ppm=0, jitter_s=0.0, duration_s=20)
    assert max(abs(s - 1) for s in run.speeds) < 1e-9


def test_starting_offset_does_not_bias_the_skew_estimate() -> None:
    """A buffer that starts 20 ms high is pulled in by the proportional term; the skew fit ignores it."""
    c = DriftController(0.030)
    run = simulate(c, skew_ppm=300, jitter_s=0.001, start_s=0.050, duration_s=40)
    assert c.skew * 1e6 == pytest.approx(300, abs=10)
    late, _ = run.settled(30)
    assert statistics.mean(late) == pytest.approx(0.030, abs=0.0005)


def test_reset_keeps_the_learned_skew_and_a_gap_restarts_the_filter() -> None:
    c = DriftController(0.030)
    simulate(c, skew_ppm=400, jitter_s=0.0, duration_s=30)
    learned = c.skew
    c.reset()
    assert c.skew == learned
    assert c.update(100.0, 0.030) == pytest.approx(1 + learned)
    # A second of silence (a stall): the next reading starts the filter over instead of integrating.
    assert c.update(101.5, 0.010) == pytest.approx(1 + learned)
    assert c.filtered_s == pytest.approx(0.010)


def test_drift_controller_clamps_at_half_a_percent() -> None:
    c = DriftController(0.030)
    speeds = [c.update(t * 0.005, 1.0) for t in range(400)]  # a second of far too much audio
    assert max(speeds) == pytest.approx(1 + MAX_TRIM)
    speeds = [c.update(2 + t * 0.005, 0.0) for t in range(4000)]
    assert min(speeds) == pytest.approx(1 - MAX_TRIM)


def test_make_rate_controller() -> None:
    assert make_rate_controller("drift", 0.02).name == "drift"
    assert make_rate_controller("reference", 0.02).target_s == 0.02
    with pytest.raises(ValueError, match="choose from drift, reference"):
        make_rate_controller("pid", 0.02)


def test_cents() -> None:
    assert cents(1.0) == 0.0
    assert cents(2.0) == pytest.approx(1200.0)
    assert cents(1.0005) == pytest.approx(0.8655, abs=1e-3)  # 0.05 % is under one cent


def test_device_clock_maps_positions_through_the_earliest_callback() -> None:
    clock = DeviceClock(RATE)
    assert clock.heard_at(0) is None and clock.buffered_s(100, 0.0) is None
    # Device time runs 1000 s behind local; callbacks run up to 2 ms late.
    for k, late in enumerate([0.002, 0.0, 0.001]):
        current = k * 0.005
        clock.callback(k * CHUNK, current + 0.010, current, 1000.0 + current + late)
    assert clock.offset_s == pytest.approx(1000.0)
    assert clock.latency_s == pytest.approx(0.010)
    # The last block starts at position 480 and is heard at local 1000.020.
    assert clock.heard_at(480) == pytest.approx(1000.020)
    assert clock.heard_at(480 + RATE // 100) == pytest.approx(1000.030)
    assert clock.position_at(1000.025) == pytest.approx(480 + 240)
    # 1000 frames written beyond what is heard at 1000.020: 1000/48000 s queued.
    assert clock.buffered_s(1480, 1000.020) == pytest.approx(1000 / RATE)
    assert clock.buffered_s(0, 1000.100) == 0.0  # never negative
