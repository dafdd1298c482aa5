"""The automatic phase offset (pure, fake clock) and the viewer's choice of presentation mode."""

import argparse
import itertools
import random
from dataclasses import replace

import pytest

from pyrofling.bench.phase import PhaseSimConfig, simulate
from pyrofling.cli.view import phase_lock_choice, presentation_config
from pyrofling.client.uri import parse_uri
from pyrofling.core.phase import wrap_phase
from pyrofling.core.viewer.phase_offset import AutoOffset, AutoOffsetConfig
from pyrofling.core.viewer.presentation import Present, PresentationConfig, PresentationLoop, Repeat, Wait

PERIOD = 1 / 59.94
#: The 20 s window alone, without the allowance for the machine's stalls (which holds a quiet link's margin at
#: 7 ms for the first ten minutes): what the window learns.
WINDOW_ONLY = AutoOffsetConfig(stall_allowance_s=0.0, beyond_free_running_s=None)
#: The margin as its tail asks, however far past free-running's wait (these tests are of how it learns the tail;
#: the cap near free-running's wait has its own below).
UNCAPPED = AutoOffsetConfig(beyond_free_running_s=None)


def feed(auto: AutoOffset, seconds: float, sigma_s: float, *, start_s: float = 0.0, mean_s: float = 0.0,
         seed: int = 1) -> float:  # fmt: skip
    """A picture a refresh, ready ``mean_s`` ± ``sigma_s`` (Gaussian) after its target; returns the end time."""
    rng = random.Random(seed)
    t = start_s
    while t < start_s + seconds:
        auto.observe(rng.gauss(mean_s, sigma_s), t)
        t += PERIOD
    return t


def test_the_deadline_sits_a_flip_margin_before_the_next_refresh_and_the_offset_a_margin_before_it() -> None:
    auto = AutoOffset(PERIOD, UNCAPPED)
    assert auto.deadline_s == pytest.approx(PERIOD - 0.001)
    assert auto.offset_s == pytest.approx(auto.deadline_s - 0.006)  # the initial margin


def test_the_margin_shrinks_to_the_jitter_it_measures() -> None:
    auto = AutoOffset(PERIOD, WINDOW_ONLY)
    feed(auto, 90.0, 0.0005)
    # 99th percentile 1.16 ms, +half its distance from the median, +0.5 ms guard: about 2.2 ms.
    assert 1.8e-3 < auto.margin_s < 2.7e-3
    assert auto.offset_s == pytest.approx(auto.deadline_s - auto.margin_s)
    big = AutoOffset(PERIOD, WINDOW_ONLY)
    feed(big, 90.0, 0.002)
    assert big.margin_s > auto.margin_s + 3e-3  # more jitter, more margin


def test_it_learns_nothing_until_locked() -> None:
    auto = AutoOffset(PERIOD, UNCAPPED)
    feed(auto, 30.0, 0.0005, mean_s=0.005)  # the host has not brought pictures to the target yet
    assert not auto.locked and not auto.state().learning
    assert auto.margin_s == AutoOffsetConfig().initial_margin_s


def test_the_margin_falls_slowly_and_rises_fast_but_never_faster_than_allowed() -> None:
    cfg = UNCAPPED
    auto = AutoOffset(PERIOD, cfg)
    margins = []
    t = 0.0
    rng = random.Random(3)
    for i in range(int(120 / PERIOD)):
        sigma = 0.0005 if i * PERIOD < 60 else 0.003  # the network gets worse after a minute
        auto.observe(rng.gauss(0.0, sigma), t)
        margins.append((t, auto.margin_s))
        t += PERIOD
    for (t0, m0), (t1, m1) in itertools.pairwise(margins):
        assert m1 - m0 <= cfg.rise_per_s * (t1 - t0) + 1e-12
        assert m0 - m1 <= cfg.fall_per_s * (t1 - t0) + 1e-12
    at_60 = next(m for tt, m in margins if tt >= 60)
    at_70 = next(m for tt, m in margins if tt >= 70)
    assert at_70 > at_60 + 3e-3  # it rose within ten seconds of the change
    assert auto.reversals <= 1  # one fall (from the initial margin), one rise: no hunting


def test_missed_refreshes_raise_the_margin_and_it_comes_back_once_they_stop() -> None:
    auto = AutoOffset(PERIOD, UNCAPPED)
    t = feed(auto, 60.0, 0.0005)
    settled = auto.margin_s
    for _ in range(4):  # stalls the percentile never saw
        auto.missed(t)
        t = feed(auto, 2.0, 0.0005, start_s=t, seed=int(t))
    assert auto.margin_s >= settled + 1.5e-3
    assert auto.state().misses_last_minute == 4
    feed(auto, 120.0, 0.0005, start_s=t, seed=9)
    assert auto.margin_s < settled + 0.6e-3


def test_allowing_more_missed_refreshes_buys_a_smaller_margin() -> None:
    strict, loose = AutoOffset(PERIOD, replace(WINDOW_ONLY, misses_per_minute=0.1)), AutoOffset(PERIOD, WINDOW_ONLY)
    lax = AutoOffset(PERIOD, replace(WINDOW_ONLY, misses_per_minute=30.0))
    for auto in (strict, loose, lax):
        feed(auto, 90.0, 0.001, seed=4)
    assert strict.margin_s > loose.margin_s + 0.3e-3 > lax.margin_s + 0.6e-3


def test_a_jittery_link_raises_the_margin_before_the_percentile_has_its_samples() -> None:
    # σ 3 ms needs about 11.4 ms (3.6 σ for half a miss a minute, plus the guard); the initial 6 ms would miss
    # several times a second.  From the spread of its first pictures it rises within two seconds, before the
    # full estimate has the samples it waits for; a calm link leaves the initial margin alone meanwhile.
    jittery = AutoOffset(PERIOD, UNCAPPED)
    feed(jittery, 1.9, 0.003)
    assert not jittery.state().learning
    assert jittery.margin_s > 0.0095
    # A plain float: numpy's would make every comparison the viewer does with the offset a numpy bool, which
    # its statistics cannot write as JSON.
    assert type(jittery.margin_s) is float and type(jittery.offset_s) is float
    calm = AutoOffset(PERIOD, UNCAPPED)
    feed(calm, 1.9, 0.0005)
    assert calm.margin_s == AutoOffsetConfig().initial_margin_s


def test_in_the_loop_the_early_estimate_spares_the_first_seconds_on_a_jittery_link() -> None:
    def repeats(config: AutoOffsetConfig) -> int:
        total = 0
        for seed in range(1, 9):
            cfg = PhaseSimConfig(duration_s=10.0, skew_ppm=1000.0, jitter_s=0.003, initial_phase=0.3, seed=seed,
                                 auto_offset=True, auto_config=config)  # fmt: skip
            total += len(simulate(cfg, "pi").repeats_at)
        return total

    early, waiting = repeats(AutoOffsetConfig()), repeats(AutoOffsetConfig(early_samples=10**9))
    assert early * 2 <= waiting, (early, waiting)


def test_a_tail_that_is_not_gaussian_is_covered_by_the_windows_latest_picture() -> None:
    # Calm pictures (σ 0.5 ms) and, every 8 s, one 7 ms late (an encoder's slow frame): the 99th percentile
    # does not see it, and half a miss a minute allows fewer than one a 20 s window, so the margin covers it.
    auto = AutoOffset(PERIOD, WINDOW_ONLY)
    rng = random.Random(5)
    t, n = 0.0, 0
    while t < 60.0:
        auto.observe(0.007 if n % 480 == 479 else rng.gauss(0.0, 0.0005), t)
        t, n = t + PERIOD, n + 1
    assert auto.margin_s >= 0.007 + AutoOffsetConfig().guard_s - 1e-4
    calm = AutoOffset(PERIOD, WINDOW_ONLY)
    feed(calm, 60.0, 0.0005)
    assert calm.margin_s < 0.003  # without the slow frames, the tail the percentile sees


def test_a_quiet_link_keeps_the_stall_allowance_until_ten_minutes_show_the_machine_stalls_less() -> None:
    # σ 0.5 ms and nothing else: the window alone would take about 2.2 ms, but a machine's stalls come as
    # pictures later than any in the window, so for the first ten minutes the margin keeps 7 ms past the
    # median.  Ten minutes without one then show this machine's own rate of late pictures, and it falls.
    auto, window_only = AutoOffset(PERIOD, UNCAPPED), AutoOffset(PERIOD, WINDOW_ONLY)
    t = feed(auto, 90.0, 0.0005)
    assert auto.margin_s == pytest.approx(AutoOffsetConfig().stall_allowance_s, abs=0.3e-3)
    assert auto.state().stall_late_ms is None
    t = feed(auto, 500.0, 0.0005, start_s=t, seed=2)
    assert auto.margin_s > 0.0065 and auto.state().stall_late_ms is None  # not yet ten minutes learnt
    feed(auto, 40.0, 0.0005, start_s=t, seed=3)
    late_ms = auto.state().stall_late_ms
    assert late_ms is not None and 1.0 < late_ms < 2.5  # the 6th latest of 36,000 pictures: about 3.6 σ
    assert auto.margin_s < 0.003
    feed(window_only, 630.0, 0.0005)  # without the allowance, no stall window either: the 20 s window alone
    assert window_only.state().stall_late_ms is None and window_only.margin_s < 0.003


def test_a_machine_that_stalls_more_often_than_allowed_is_covered_once_its_stalls_are_learnt() -> None:
    # σ 0.5 ms, and every 30 s a picture 9 ms late (twice a minute, four times the rate allowed): past the 7 ms
    # allowance, and a 20 s window never holds the last one when the next comes, so each misses at first.  Once
    # ten minutes of them are learnt, the margin covers them: no more misses.
    auto = AutoOffset(PERIOD, UNCAPPED)
    rng = random.Random(7)
    t, n = 0.0, 0
    misses_first, misses_after = 0, 0
    while t < 900.0:
        stall = n % 1800 == 1799
        lateness = 0.009 if stall else rng.gauss(0.0, 0.0005)
        if stall and lateness > auto.margin_s:
            misses_first += t < 600.0
            misses_after += t >= 660.0
        auto.observe(lateness, t)
        t, n = t + PERIOD, n + 1
    assert misses_first >= 10
    assert misses_after == 0
    assert auto.margin_s >= 0.009 + AutoOffsetConfig().guard_s - 1e-4
    late_ms = auto.state().stall_late_ms
    assert late_ms == pytest.approx(9.0)


def test_the_stall_allowance_leaves_a_jittery_links_margin_where_its_spread_puts_it() -> None:
    # σ 3 ms: the window's extrapolated tail (about 11 ms) lies past the median + 7 ms already.
    with_allowance, window_only = AutoOffset(PERIOD, UNCAPPED), AutoOffset(PERIOD, WINDOW_ONLY)
    for auto in (with_allowance, window_only):
        feed(auto, 120.0, 0.003, seed=5)
    assert window_only.margin_s > AutoOffsetConfig().stall_allowance_s + 2e-3
    assert with_allowance.margin_s == pytest.approx(window_only.margin_s, abs=1e-9)


@pytest.mark.slow  # 18 runs of five minutes each, 8 s on the 2-core machine
def test_stationary_jitter_never_makes_it_hunt() -> None:
    # The 20 s window's percentile has noise of its own, about the dead band's width: now and then it moves
    # the margin by a millisecond, and later back.  Hunting would be a change of direction every few seconds;
    # five minutes of the same jitter show at most a few, and usually one or none.
    for sigma in (0.0003, 0.001, 0.002):
        counts = []
        for seed in range(6):
            auto = AutoOffset(PERIOD, UNCAPPED)
            feed(auto, 300.0, sigma, seed=seed)
            counts.append(auto.reversals)
        assert max(counts) <= 4 and sorted(counts)[len(counts) // 2] <= 1, (sigma, counts)


@pytest.mark.parametrize("jitter_ms", [0.5, 1.0, 2.0])
def test_in_the_loop_it_locks_and_shows_pictures_sooner_than_the_reference_offset(jitter_ms: float) -> None:
    """The whole loop simulated: host frame clock, pipeline jitter, the presentation loop with auto offset."""
    base = PhaseSimConfig(duration_s=60.0, skew_ppm=1000.0, jitter_s=jitter_ms / 1000, initial_phase=0.3)
    fixed = simulate(base, "pi")  # the reference's recommendation: phase_locked=0.0&deadline=0.008
    auto = simulate(replace(base, auto_offset=True), "pi")
    assert auto.lock_s is not None and auto.lock_s < 1.0
    assert auto.wait_ms is not None and fixed.wait_ms is not None
    assert auto.wait_ms < fixed.wait_ms - 6.0  # ready → on screen: the picture is ready just before the refresh
    assert auto.repeated_after_lock <= 1
    assert auto.margin_reversals <= 1


def test_the_loop_takes_the_learnt_offset_for_its_phase_errors() -> None:
    loop: PresentationLoop[int] = PresentationLoop(PresentationConfig.automatic(), PERIOD)
    assert loop.auto is not None and loop.config.fifo and loop.config.mode == "auto"
    assert loop.offset_s == pytest.approx(loop.auto.offset_s) and loop.deadline_s == pytest.approx(loop.auto.deadline_s)
    loop.vblank(10.0)
    loop.frame_ready(1, 10.0 + loop.offset_s - 0.001)  # a millisecond early
    d = loop.poll(10.0 + loop.offset_s)
    assert getattr(d, "phase_error_us", None) == 1000


# -- the viewer's flags ------------------------------------------------------------------------


def _args(phase_locked: object = None, deadline: float | None = None, repeats: float = 1.0) -> argparse.Namespace:
    return argparse.Namespace(phase_locked=phase_locked, deadline=deadline, repeats_per_minute=repeats)


def test_the_viewer_locks_automatically_unless_told_otherwise() -> None:
    plain = parse_uri("pyro://127.0.0.1:9876")
    assert presentation_config(_args(), plain).mode == "auto"
    assert presentation_config(_args("auto"), plain).mode == "auto"
    assert presentation_config(_args("off"), plain).mode == "free"
    fixed = presentation_config(_args(), parse_uri("pyro://h:1?phase_locked=0.0&deadline=0.008"))
    assert (fixed.mode, fixed.offset_s, fixed.deadline_s) == ("fixed", 0.0, 0.008)
    # The reference's meaning: a deadline alone waits for pictures but does not lock.
    assert presentation_config(_args(), parse_uri("pyro://h:1?deadline=0.008")).mode == "deadline"
    assert presentation_config(_args(0.004, 0.012), plain).offset_s == 0.004
    assert presentation_config(_args("off"), parse_uri("pyro://h:1?phase_locked=0.0")).mode == "free"
    assert presentation_config(_args(repeats=6.0), plain).auto.misses_per_minute == 6.0
    with pytest.raises(ValueError, match="auto' finds its own deadline"):
        presentation_config(_args("auto", 0.01), plain)


def test_the_phase_lock_flag_says_what_it_takes() -> None:
    assert phase_lock_choice("0.008") == 0.008
    with pytest.raises(argparse.ArgumentTypeError, match="'auto' \\(the default\\) or 'off'"):
        phase_lock_choice("sometimes")
    with pytest.raises(argparse.ArgumentTypeError, match="out of range"):
        phase_lock_choice("2")


def test_a_presenter_that_wakes_late_moves_the_deadline_earlier_and_the_offset_with_it() -> None:
    auto = AutoOffset(PERIOD, UNCAPPED)
    rng = random.Random(7)
    t = 0.0
    while t < 60.0:
        auto.observe(rng.gauss(0.0, 0.0005), t)
        auto.woke(abs(rng.gauss(0.0, 0.0012)), t)  # a busy machine: the presenter acts a millisecond or two late
        t += PERIOD
    assert 0.0035 < auto.flip_s <= AutoOffsetConfig().max_flip_margin_s
    assert auto.deadline_s == pytest.approx(PERIOD - auto.flip_s)
    assert auto.offset_s == pytest.approx(auto.deadline_s - auto.margin_s)
    quiet = AutoOffset(PERIOD, UNCAPPED)
    feed(quiet, 60.0, 0.0005)
    for i in range(200):
        quiet.woke(0.0001, 60.0 + i * PERIOD)
    # A prompt presenter keeps the deadline at its own last moment: the presenter waits for a picture until
    # then (a deadline earlier than that would be a guard on top of the margin's, paid in latency).
    assert quiet.flip_s == pytest.approx(AutoOffsetConfig().min_flip_margin_s)
    loop: PresentationLoop[int] = PresentationLoop(PresentationConfig.automatic(), PERIOD)
    assert quiet.deadline_s == pytest.approx(loop.wait_s)


def test_the_loop_tells_it_how_late_the_presenter_acted() -> None:
    loop: PresentationLoop[int] = PresentationLoop(PresentationConfig.automatic(), PERIOD)
    assert loop.auto is not None
    loop.vblank(10.0)
    loop.frame_ready(1, 10.005)
    loop.poll(10.007)  # the picture was ready 2 ms before the presenter got to it
    loop.vblank(10.0 + PERIOD)
    loop.poll(10.0 + PERIOD + loop.wait_s + 0.003)  # woke 3 ms after it stopped waiting: a miss
    assert [round(w * 1000, 3) for w in loop.auto._wakes.values] == [2.0, 3.0]


def test_a_picture_later_than_half_a_refresh_is_learnt_as_late_and_still_shown_before_the_refresh() -> None:
    # A busy machine: a wide margin, so the offset sits early in the refresh, and a presenter that wakes a
    # little late, so its deadline sits 1.5 ms before the refresh (its last moment stays 1 ms before).
    busy = AutoOffsetConfig(beyond_free_running_s=None, initial_margin_s=0.009, flip_margin_s=0.0015)
    loop: PresentationLoop[int] = PresentationLoop(PresentationConfig.automatic(busy), PERIOD)
    assert loop.auto is not None
    loop.vblank(10.0)
    target = 10.0 + loop.offset_s
    late_by = loop.deadline_s - loop.offset_s + 0.0003  # just after the deadline, more than half a refresh late
    assert late_by > PERIOD / 2
    d = loop.poll(10.0 + loop.deadline_s)
    assert isinstance(d, Wait) and d.until_s == pytest.approx(10.0 + PERIOD - 0.001)  # waits past the deadline
    loop.frame_ready(1, target + late_by)
    d = loop.poll(target + late_by)
    assert isinstance(d, Present) and d.on_screen_s == pytest.approx(10.0 + PERIOD)  # in time for its refresh
    assert d.late_s == pytest.approx(late_by)  # late, as it was: the margin must learn this tail
    # The host is told it was late too: folded into half a refresh it would read as early, "deliver later".
    assert d.phase_error_us == round(-late_by * 1e6) and wrap_phase(-late_by, PERIOD) > 0
    assert loop.auto._recent[-1] == pytest.approx(late_by)
    assert loop.counters.missed_deadlines == 0 and loop.late_grace_s == pytest.approx(PERIOD - 0.001)
    # Nothing by then: a miss.
    loop.vblank(10.0 + PERIOD)
    assert isinstance(loop.poll(10.0 + 2 * PERIOD - 0.001), Repeat) and loop.counters.missed_deadlines == 1


def test_a_leftover_picture_is_shown_at_the_deadline_not_at_the_last_moment() -> None:
    loop: PresentationLoop[int] = PresentationLoop(PresentationConfig.automatic(), PERIOD)
    loop.frame_ready(1, 10.0 + loop.offset_s - PERIOD * 0.6)  # from an earlier refresh
    loop.vblank(10.0)
    d = loop.poll(10.0)
    assert isinstance(d, Wait) and d.until_s == pytest.approx(10.0 + loop.deadline_s)  # a fresher one may come
    d = loop.poll(10.0 + loop.deadline_s)
    assert isinstance(d, Present) and d.frame == 1 and d.on_screen_s == pytest.approx(10.0 + PERIOD)


def test_a_network_jittering_by_3_ms_gets_the_margin_one_late_picture_a_minute_needs() -> None:
    # Gaussian, σ 3 ms: one picture in 3596 runs 3.45 σ = 10.4 ms past the median; with the guard, ~10.9 ms.
    auto = AutoOffset(PERIOD, AutoOffsetConfig(beyond_free_running_s=None, misses_per_minute=1.0))
    feed(auto, 120.0, 0.003)
    assert 0.0100 < auto.margin_s < 0.0120
    assert auto.offset_s > 0.0  # still inside the period it is for


def test_a_miss_beyond_the_allowed_rate_raises_even_a_wide_margin_whose_dead_band_is_wider_than_the_bump() -> None:
    # σ 2.5 ms: a margin of about 9 ms, whose dead band (12 % of it, 1.1 ms) is wider than one miss's 0.5 ms.
    # The early estimate off: the margin rises from the initial one to its target and stops there (after an
    # early rise it may rest above its target, inside the band, where one bump is already covered).
    auto = AutoOffset(PERIOD, AutoOffsetConfig(beyond_free_running_s=None, misses_per_minute=1.0, early_samples=10**9))
    t = feed(auto, 60.0, 0.0025)
    settled = auto.margin_s
    assert AutoOffsetConfig().band_share * settled > AutoOffsetConfig().miss_step_s
    auto.missed(t)  # the one a minute allowed: no move
    t = feed(auto, 2.0, 0.0025, start_s=t, seed=2)
    assert auto.margin_s == pytest.approx(settled, abs=0.2e-3)
    auto.missed(t)  # one more: the margin rises by the bump, dead band or not
    t = feed(auto, 2.0, 0.0025, start_s=t, seed=3)
    assert auto.margin_s >= settled + 0.4e-3


@pytest.mark.parametrize("hz", [59.94, 120.0, 240.0])
def test_the_margin_never_pushes_the_offset_out_of_its_period(hz: float) -> None:
    auto = AutoOffset(1 / hz, UNCAPPED)
    assert auto.offset_s >= 0.001 - 1e-9  # from the start (6 ms of initial margin is most of 240 Hz's period)
    feed(auto, 120.0, 0.005, mean_s=0.0)  # more jitter than the period can cover
    assert auto.margin_s <= auto.max_margin_s + 1e-9 and auto.offset_s >= 0.001 - 1e-9
    assert auto.max_margin_s == pytest.approx(min(0.016, auto.deadline_s - 0.001))


def test_the_picture_a_missed_refresh_waited_for_is_learnt_when_it_comes_and_is_dropped() -> None:
    """A stall: one picture 6 ms after its target, past the wait, so its refresh repeats; it comes during the
    next refresh, a leftover by its stamp, and is dropped for that refresh's own.  Its lateness is the tail the
    margin missed: learnt, the margin covers it (left out, only a miss's bump would raise it)."""
    rng = random.Random(3)
    loop: PresentationLoop[int] = PresentationLoop(PresentationConfig.automatic(WINDOW_ONLY), PERIOD)
    assert loop.auto is not None
    v, frame = 10.0, 0

    def calm_refresh() -> None:
        nonlocal v, frame
        loop.vblank(v)
        target = v + loop.offset_s
        done = target + rng.gauss(0.0, 0.0003)
        loop.frame_ready(frame, done, target - 0.020)
        d = loop.poll(max(v, done))
        assert isinstance(d, Present) and d.frame == frame
        v, frame = v + PERIOD, frame + 1

    for _ in range(int(30 / PERIOD)):
        calm_refresh()
    calm_margin = loop.auto.margin_s
    assert loop.auto.locked and calm_margin < 0.004
    loop.vblank(v)
    stalled_target = v + loop.offset_s
    wait_end = v + loop.wait_s
    assert isinstance(loop.poll(wait_end), Repeat) and loop.counters.missed_deadlines == 1
    v += PERIOD
    loop.vblank(v)
    loop.frame_ready(frame, stalled_target + 0.006, stalled_target - 0.020)  # the stalled picture, 6 ms late
    assert isinstance(loop.poll(stalled_target + 0.006), Wait)  # a leftover: a fresher one may come
    target = v + loop.offset_s
    loop.frame_ready(frame + 1, target, target - 0.020)
    d = loop.poll(target)
    assert isinstance(d, Present) and d.frame == frame + 1 and d.dropped == 1
    v, frame = v + PERIOD, frame + 2
    for _ in range(int(3 / PERIOD)):
        calm_refresh()
    assert loop.auto.margin_s >= 0.006 + AutoOffsetConfig().guard_s - 1e-4
    assert loop.counters.missed_deadlines == 1


def test_where_the_tail_is_longer_than_a_fast_display_can_spare_the_lock_waits_no_longer_than_free_running() -> None:
    """At 143.86 Hz (6.95 ms a refresh) pictures whose ready times spread by σ 1.5 ms would need a margin past
    half a refresh: the lock keeps its wait (margin and flip margin) within ``beyond_free_running_s`` of
    free-running's average wait (half a refresh, and the lead its picture is handed over by) and says what the
    tail asked for; uncapped, it would wait that much longer for
    every picture. At 59.94 Hz the same spread fits, and a jittery link's wider one is still covered there."""
    fast = 1 / 143.86
    cfg = AutoOffsetConfig()
    assert cfg.beyond_free_running_s is not None
    capped, uncapped = AutoOffset(fast, cfg), AutoOffset(fast, UNCAPPED)
    rng = random.Random(5)
    t = 0.0
    while t < 60.0:
        late = rng.gauss(0.0, 0.0015)
        capped.observe(late, t)
        uncapped.observe(late, t)
        t += fast
    wait = capped.margin_s + capped.flip_s
    assert wait <= fast / 2 + cfg.min_flip_margin_s + cfg.beyond_free_running_s + 1e-9
    assert uncapped.margin_s > capped.margin_s + 0.001
    wanted = capped.state().wanted_margin_ms
    assert wanted is not None and wanted > capped.margin_s * 1000
    assert uncapped.margin_s == pytest.approx(uncapped.max_margin_s)  # uncapped, it waits all the refresh allows

    calm = AutoOffset(PERIOD, cfg)
    feed(calm, 60.0, 0.0015, seed=5)
    assert calm.state().wanted_margin_ms is None
    assert calm.margin_s + calm.flip_s < PERIOD / 2
    jittery = AutoOffset(PERIOD, cfg)  # at 60 Hz a jittery link's tail is still covered: smoothness chosen there
    feed(jittery, 60.0, 0.003, seed=5)
    assert jittery.margin_s > PERIOD / 2 + cfg.beyond_free_running_s and jittery.state().wanted_margin_ms is None


def run_with_stalls(period_s: float, stall_every_s: float, seconds: float = 90.0) -> list[float | None]:
    """A lock fed pictures whose spread is narrow (σ 0.3 ms: the tail alone fits any display) but one in every
    ``stall_every_s`` 6 ms late; a picture later than the presenter's last moment misses its refresh (and is
    learnt when it comes). What the lock says the pictures ask for, each refresh (None: it covers them)."""
    cfg = AutoOffsetConfig()
    auto = AutoOffset(period_s, cfg)
    rng = random.Random(7)
    every = round(stall_every_s / period_s)
    said = []
    for i in range(round(seconds / period_s)):
        t = i * period_s
        late = 0.006 if i > 600 and i % every == 0 else rng.gauss(0.0, 0.0003)
        if late > auto.margin_s + auto.flip_s - cfg.min_flip_margin_s:
            auto.missed(t)
            auto.missed_picture_came(late, t)
        else:
            auto.observe(late, t)
        said.append(auto.state().wanted_margin_ms)
    return said


def test_a_fast_display_that_keeps_missing_at_the_locks_ceiling_is_said_to_outrun_the_machine() -> None:
    """At 143.86 Hz a 6 ms stall is more than the lock can spare (its wait is held at free-running's), whatever
    the narrow tail's percentiles say: stalls every 12 s miss five times a minute, and the lock says what they ask
    for (its one line, and the viewer's PICTURE_RATE judge). One a minute or less is within what it promises, and
    at 59.94 Hz the margin covers the stall: neither says so."""
    fast = 1 / 143.86
    often = run_with_stalls(fast, 12.0)
    assert all(w is None for w in often[:600])  # before the stalls: the tail fits
    wanted = [w for w in often if w is not None]
    assert wanted and min(wanted) > AutoOffset(fast).max_margin_s * 1000
    assert all(w is None for w in run_with_stalls(fast, 70.0))
    assert all(w is None for w in run_with_stalls(PERIOD, 12.0))


def test_in_the_loop_a_fast_display_gets_free_runnings_wait_sooner_than_the_tail_and_hardly_a_repeat() -> None:
    """The phase loop simulated at 144 fps on a display 1000 ppm slower, pictures ready with σ 1 ms: the capped
    lock (free-running's average wait, half a refresh and the lead, 4.7 ms) shows them a millisecond sooner than
    the uncapped one, which waits out the tail, and that wait still covers 3.7 σ: no more than two repeats in the
    minute (free-running repeats and drops wherever the display and the stream drift past each other: hundreds
    a minute in ``bench latency``)."""
    base = PhaseSimConfig(host_fps=144.0, skew_ppm=1000.0, duration_s=60.0, pipeline_delay_s=0.006, jitter_s=0.001,
                          initial_phase=0.3, auto_offset=True)  # fmt: skip
    capped = simulate(base, "pi")
    uncapped = simulate(replace(base, auto_config=UNCAPPED), "pi")
    assert capped.glass_ms is not None and uncapped.glass_ms is not None
    assert capped.glass_ms < uncapped.glass_ms - 1.0
    assert uncapped.repeated_after_lock <= 2 and capped.repeated_after_lock <= 2


@pytest.mark.parametrize("sigma_ms", [0.3, 0.5])
def test_on_a_fast_display_pictures_with_a_narrow_tail_are_shown_sooner_than_free_running_without_a_repeat(
    sigma_ms: float,
) -> None:
    """144 fps on a 143.86 Hz display, pictures ready with σ 0.3 or 0.5 ms: free-running (the mailbox) shows its
    pictures sooner than half a refresh and its lead on average (of two ready in one refresh it shows the newer),
    so a lock held at that wait by the stall allowance alone lost to it. Held ``feared_below_free_running_s``
    shorter, the lock shows them sooner than free-running, with no repeat in the minute; a tail that is seen
    still takes the wait up to free-running's (σ 1 ms, the test above)."""
    base = PhaseSimConfig(host_fps=144.0, skew_ppm=1000.0, duration_s=60.0, pipeline_delay_s=0.004,
                          jitter_s=sigma_ms / 1000, initial_phase=0.3, auto_offset=True)  # fmt: skip
    auto = simulate(base, "pi")
    at_free_runnings_wait = simulate(replace(base, auto_config=AutoOffsetConfig(feared_below_free_running_s=0)), "pi")
    free = simulate(replace(base, auto_offset=False, deadline_s=0.0), "none")
    assert auto.glass_ms is not None and free.glass_ms is not None and at_free_runnings_wait.glass_ms is not None
    assert auto.glass_ms < free.glass_ms - 0.3 and at_free_runnings_wait.glass_ms > free.glass_ms
    assert auto.repeated_after_lock == 0 and free.repeated_after_lock > 100
