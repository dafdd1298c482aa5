"""``bench latency``'s lock bound: the lowest glass median a phase lock could reach on a run's pictures."""

from __future__ import annotations

import random
import statistics
from dataclasses import asdict
from typing import Any

import pytest

from pyrofling.bench.latency import LAST_MOMENT_MS, bound_verdict, lock_bound, rate_tail
from pyrofling.bench.phase import PhaseSimConfig, simulate
from pyrofling.core.viewer.phase_offset import AutoOffsetConfig


def test_one_late_picture_a_minute_is_allowed_and_the_bound_is_the_rest_plus_the_last_moment() -> None:
    # A minute at 60 Hz: 3599 pictures ready 10 ms after capture, one 30 ms after it.
    ready = [10.0] * 3599 + [30.0]
    random.Random(1).shuffle(ready)
    one = lock_bound(ready, 60.0, 1.0, 1.5)
    assert one == {"ready_ms_median": 10.0, "ready_ms_tail": 10.0, "ready_ms_latest": 30.0, "lock_bound_ms": 11.5}
    # Two late pictures in that minute: a lock must cover the second, or it repeats twice.
    two = lock_bound([10.0] * 3598 + [25.0, 30.0], 60.0, 1.0, 1.5)
    assert two["ready_ms_tail"] == 25.0 and two["lock_bound_ms"] == 26.5
    # A higher allowed rate lets both go.
    assert lock_bound([10.0] * 3598 + [25.0, 30.0], 60.0, 2.0, 1.5)["ready_ms_tail"] == 10.0


def test_the_bound_is_where_the_loop_itself_stops_repeating_not_a_flip_margin_later() -> None:
    # A minute of pictures ready 10 ms after capture, two of them 16 ms after: at one repeat a minute a lock
    # must show the second of those in time.
    ready = [10.0] * 3600
    ready[1000] = ready[2500] = 16.0
    bound = lock_bound(ready, 59.94, 1.0, LAST_MOMENT_MS)["lock_bound_ms"]
    assert bound is not None
    # The same pictures through the pure core (the presenter, the host's clock steered by pi) at fixed margins
    # 0.3 ms apart, each giving its own glass median.
    outcomes = []
    for margin_ms in (4.6, 4.9, 5.2, 5.5, 5.8, 6.1):
        fixed = AutoOffsetConfig(
            initial_margin_s=margin_ms / 1000, min_margin_s=margin_ms / 1000, max_margin_s=margin_ms / 1000
        )
        sim = PhaseSimConfig(
            duration_s=60.0,
            skew_ppm=1000.0,
            pipeline_delay_s=0.010,
            recorded_delays_s=tuple(ms / 1000 for ms in ready),
            initial_phase=0.3,
            auto_offset=True,
            auto_config=fixed,
        )
        r = simulate(sim, "pi")
        assert r.lock_s is not None and r.glass_ms is not None
        outcomes.append((r.glass_ms, r.repeated_after_lock))
    # At the bound and above it, at most the allowed repeat; a few tenths of a ms below it, both late pictures
    # repeat (a bound adding the 1.5 ms flip margin, 0.5 ms higher, called glass medians that repeat none too low).
    assert all(repeats <= 1 for glass, repeats in outcomes if glass >= bound - 0.05)
    assert all(repeats == 2 for glass, repeats in outcomes if glass <= bound - 0.2)
    assert any(bound - 0.5 < glass <= bound - 0.2 for glass, _ in outcomes)
    assert any(bound - 0.05 <= glass < bound + 0.4 for glass, _ in outcomes)


def test_where_a_run_holds_fewer_pictures_than_the_rate_allows_its_tail_is_extrapolated_not_its_latest() -> None:
    # Half a repeat a minute at 60 Hz: the quantile 1 - 1/7200, 3.63 σ above the mean of a Gaussian spread.
    share = 0.5 / 3600
    sigma = 3.0
    quantile = 10.0 + sigma * statistics.NormalDist().inv_cdf(1 - share)
    runs: dict[int, tuple[list[float], list[float]]] = {}
    for n in (3500, 1200):  # a minute's pictures, and 20 s's (the bench's default)
        rngs = [random.Random(seed) for seed in range(40)]
        samples = [[rng.gauss(10.0, sigma) for _ in range(n)] for rng in rngs]
        runs[n] = ([rate_tail(ready, share) for ready in samples], [max(ready) for ready in samples])
    fitted, latest = runs[3500]
    # A minute: the fit errs a little above the quantile (an exponential tail over a Gaussian one), and
    # varies less from run to run than the latest picture does.
    assert 0 < statistics.fmean(fitted) - quantile < 0.2 * sigma
    assert statistics.pstdev(fitted) < 0.85 * statistics.pstdev(latest)
    fitted, latest = runs[1200]
    # Twenty seconds: the latest picture falls a third of a σ short of a rate that run cannot show; the fit
    # errs above it, by less.
    assert statistics.fmean(latest) < quantile - 0.25 * sigma
    assert abs(statistics.fmean(fitted) - quantile) < quantile - statistics.fmean(latest)
    assert lock_bound([], 60.0, 1.0, 1.0)["lock_bound_ms"] is None


def test_an_extrapolated_tail_still_covers_a_stall_of_two_pictures() -> None:
    # Two pictures of a minute far beyond the rest: a lock below the second repeats twice, whatever a fit says.
    ready = [10.0 + 0.001 * i for i in range(3498)] + [25.0, 30.0]
    assert rate_tail(ready, 0.5 / 3600) == 25.0
    # One beyond the rest: the fit to the others (a tail that hardly spreads) lets it repeat.
    assert rate_tail(ready[:-1], 0.5 / 3600) < 15.0
    # Where the run holds the rate, its own order statistic, as before.
    assert rate_tail(ready, 1.0 / 3500) == 25.0


@pytest.mark.parametrize(("free_median", "feasible"), [(19.0, False), (30.0, True)])
def test_the_verdict_compares_autos_bound_with_free_runnings_median(free_median: float, feasible: bool) -> None:
    rows = [
        {"mode": "free", "glass_ms_median": free_median},
        {"mode": "auto", "lock_bound_ms": 24.5, "ready_ms_tail": 23.0, "bound_repeats_per_minute": 1.0},
    ]
    said = bound_verdict(rows)
    assert "24.5 ms" in said and f"{free_median:.1f} ms" in said
    assert ("an offset could give both" in said) is feasible
    assert ("no phase offset could give both" in said) is not feasible
    assert bound_verdict(rows[:1]) == ""  # nothing to compare without both runs


def test_a_traced_verdict_names_the_stage_that_alone_takes_more_than_a_lock_could_spare() -> None:
    # Free-running shows pictures 20 ms after capture; auto's are ready after 12, so a lock showing them no
    # later than free-running may wait 20 - 12 - 1 (the presenter's last moment) = 7 ms; the encode alone once a
    # minute ran 9 over.
    traced = {
        "stage_median_ms": {"encode": 8.0, "decode": 1.5},
        "stage_tail_ms": {"encode": 17.0, "decode": 4.0},
    }
    auto = {
        "mode": "auto",
        "lock_bound_ms": 30.0,
        "ready_ms_tail": 28.5,
        "ready_ms_median": 12.0,
        "last_moment_ms": 1.0,
        "bound_repeats_per_minute": 1.0,
        "late_pictures": traced,
    }
    said = bound_verdict([{"mode": "free", "glass_ms_median": 20.0}, auto])
    assert "at most 7.0 ms" in said and "the encode alone ran 9.0 ms over its median" in said
    # Where an offset could give both, there is nothing to explain.
    assert "alone" not in bound_verdict([{"mode": "free", "glass_ms_median": 31.0}, auto])


@pytest.mark.io
def test_pinning_gives_the_host_side_and_the_viewers_their_own_cpus() -> None:
    import os
    import subprocess
    import sys

    from pyrofling.bench.stream import _pinned, split_cpus

    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        pytest.skip("needs two CPUs")
    cpus = split_cpus()
    host_cpus, viewer_cpus = cpus.host, cpus.viewers
    assert host_cpus and viewer_cpus and not host_cpus & viewer_cpus
    assert host_cpus | viewer_cpus | cpus.relay == allowed
    # A real child: pinned before it starts a thread, so the thread it starts runs there too.
    code = "import threading, os, time; t = threading.Thread(target=time.sleep, args=(0.5,)); time.sleep(0.3)\n"
    code += "t.start(); print(sorted(os.sched_getaffinity(t.native_id)), flush=True); t.join()"
    proc = _pinned(subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True), viewer_cpus)
    out, _ = proc.communicate(timeout=20)
    assert out.strip() == str(sorted(viewer_cpus))


def test_the_relay_gets_a_cpu_of_its_own_where_the_viewers_can_spare_one() -> None:
    from pyrofling.bench.stream import split_cpus

    # The 16-CPU machine: eight for the host side, seven for the viewer, one for netsim's relay.
    big = split_cpus(set(range(16)))
    assert big.host == set(range(8)) and big.viewers == set(range(8, 15)) and big.relay == {15}
    # Where the viewers' half is smaller, the relay stays with the host side (on 2 cores it takes turns there).
    for n in (2, 3, 6):
        small = split_cpus(set(range(n)))
        assert small.relay == small.host and not small.host & small.viewers
        assert small.host | small.viewers == set(range(n)) and len(small.viewers) >= len(small.host)
    with pytest.raises(ValueError, match="needs two"):
        split_cpus({3})


@pytest.mark.io
def test_pinning_on_one_cpu_is_refused_before_anything_runs() -> None:
    import os
    import subprocess
    import sys

    one_cpu = min(os.sched_getaffinity(0))
    done = subprocess.run(
        [sys.executable, "-m", "pyrofling", "bench", "latency", "--pin-cpus", "--duration", "1", "--modes", "free"],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: os.sched_setaffinity(0, {one_cpu}),
    )
    assert done.returncode == 2
    assert "--pin-cpus" in done.stderr and "needs two" in done.stderr and "running" not in done.stderr


def test_a_lock_through_a_jittery_link_counts_from_when_it_locked_not_from_a_lucky_quiet_spell() -> None:
    from pyrofling.bench.latency import lock_threshold, lock_time

    rng = random.Random(3)

    def measured(true_us: list[float], sigma_us: float) -> list[tuple[float, int]]:
        x, trace = 0.0, []
        for i, true in enumerate(true_us):  # a picture a refresh, the link's jitter correlated 0.4 with the last
            x = 0.4 * x + (1 - 0.4**2) ** 0.5 * rng.gauss(0.0, 1.0)
            trace.append((i / 60, int(true + sigma_us * x)))
        return trace

    # Locked from the start, measured through σ 3.5 ms: the half-second means stray about 0.8 ms.
    locked = measured([0.0] * 3600, 3500.0)
    threshold = lock_threshold(locked, 1.0)
    assert 2.0 < threshold < 3.5
    assert lock_time(locked, threshold) == 0.0
    assert (lock_time(locked, 1.0) or 60.0) > 2.0  # a fixed millisecond waited for a quiet spell
    # Still a lock's threshold: a phase 6 ms off through the same link never locks.
    off = measured([6000.0] * 3600, 3500.0)
    assert lock_time(off, lock_threshold(off, 1.0)) is None
    # A quiet link keeps the fixed millisecond: a phase converging from 6 ms locks once within it.
    quiet = measured([6000.0 * 0.5 ** (i / 60) for i in range(3600)], 100.0)
    assert lock_threshold(quiet, 1.0) == 1.0
    assert lock_time(quiet, 1.0) == pytest.approx(2.5, abs=0.5)


def test_repeats_count_once_locked_and_past_the_start_up_which_is_stated_apart() -> None:
    from pyrofling.bench.latency import LatencyBenchConfig, format_table, pool, summarize

    cfg = LatencyBenchConfig(duration_s=62.0, modes=("auto",))
    pres = {
        "phase_trace": [(t / 10, 0) for t in range(5, 600)],  # locked from the start
        "repeat_times": [0.3, 1.2, 30.0, 59.95],  # two while the decoder starts, one a minute after, the run's end
        "ready_trace": [(0.1, 40.0), *((t / 10, 8.0) for t in range(21, 600))],
        "glass_ms": [12.0] * 100,
        "presented": 3700,
        "repeated": 3,
    }
    raw = {"viewers": [{"presentation": pres}], "host": {"frames_encoded": 3720}}
    row = summarize("auto", raw, cfg)
    # The refresh after the last picture (59.9 s: the host stopped) is the run's end, not a repeat.
    assert row["repeated_after_lock"] == 1 and row["repeats_per_minute"] == pytest.approx(1.0)
    assert row["startup_repeats"] == 2 and row["startup_ready_ms_max"] == 40.0
    assert max(row["ready_ms"]) == 8.0  # the start-up's slow picture is not the tail
    pooled = pool([dict(row, rate_trim_ppm=0.0, machine_steal_pct=None)])
    text = format_table({"config": asdict(cfg), "rows": [pooled]})
    assert "the slowest picture's capture -> ready, and refreshes repeated: auto 40.0 ms, 2 repeated" in text
    # A pinned run's JSON says how its machine split the CPUs; printed elsewhere, the table says the same.
    pinned = {"host": list(range(8)), "viewers": list(range(8, 15)), "relay": [15]}
    cfg = LatencyBenchConfig(duration_s=62.0, modes=("auto",), pin_cpus=True, jitter_sigma_ms=3.0)
    text = format_table({"config": asdict(cfg), "rows": [pooled], "cpus": pinned})
    assert "host on CPU 0,1,2,3,4,5,6,7 and viewer on CPU 8,9,10,11,12,13,14, netsim's relay on CPU 15" in text


def test_an_early_decoding_row_says_how_many_pictures_were_begun_from_their_parts() -> None:
    from pyrofling.bench.latency import LatencyBenchConfig, format_table, pool, summarize

    cfg = LatencyBenchConfig(duration_s=62.0, modes=("free",), also_early_decode=True)
    pres = {"ready_trace": [(t / 10, 8.0) for t in range(21, 600)], "glass_ms": [12.0] * 100}
    viewer = {"presentation": pres, "pictures_decoded_early": 1800, "parts_decoded": 9000, "part_feeds": 8100}
    host = {"frames_encoded": 3720}
    rows = [
        pool([dict(summarize("free", {"viewers": [{"presentation": pres}], "host": host}, cfg), rate_trim_ppm=0.0)]),
        pool(
            [dict(summarize("free", {"viewers": [viewer], "host": host}, cfg, label="free early"), rate_trim_ppm=0.0)]
        ),
    ]
    text = format_table({"config": asdict(cfg), "rows": rows})
    assert "decoded early (begun from their parts): free early 1800 of 3720 pictures, 9000 parts in 8100 " in text
    assert "free 0 of" not in text  # the whole-picture row has no such line


def test_repeats_whose_picture_was_on_its_way_while_the_machine_ran_slow_are_counted() -> None:
    from pyrofling.bench.latency import LatencyBenchConfig, format_table, pool, summarize

    cfg = LatencyBenchConfig(duration_s=62.0, modes=("auto",))
    started = 1000.0  # the viewer's presenter started then (monotonic, as the pace meter's spells)
    pres = {
        "phase_trace": [(t / 10, 0) for t in range(5, 600)],
        "repeat_times": [10.0, 20.0, 40.0],
        "ready_trace": [(t / 10, 8.0) for t in range(21, 600)],
        "glass_ms": [12.0] * 100,  # p95: a repeat looks 12 ms back for a spell
        "started_s": started,
    }
    pace = {
        "spells": [(started + 9.995, started + 10.03, 12.0), (started + 19.95, started + 19.98, 8.0)],
        "slow_ms_per_minute": 65.0,
        "spells_per_minute": 2.0,
        "worst_factor": 12.0,
    }
    raw = {"viewers": [{"presentation": pres}], "host": {"frames_encoded": 3720}, "machine_pace": pace}
    row = summarize("auto", raw, cfg)
    # 10.0 s: in the spell; 20.0 s: the spell ended 20 ms before, more than a glass time back; 40.0 s: none.
    assert row["repeated_after_lock"] == 3 and row["repeats_in_slow_spells"] == 1
    assert row["machine_slow_ms_per_min"] == 65.0
    text = format_table({"config": asdict(cfg), "rows": [pool([dict(row, rate_trim_ppm=0.0)])]})
    assert "slow/min" in text and "65 ms" in text
    no_meter = summarize("auto", {**raw, "machine_pace": None}, cfg)
    assert no_meter["repeats_in_slow_spells"] is None and no_meter["machine_slow_ms_per_min"] is None


def test_the_hosts_slice_threads_are_the_hosts_own_unless_the_bench_is_told() -> None:
    from pyrofling.bench.latency import LatencyBenchConfig, scenario_for

    def threads(cfg: LatencyBenchConfig) -> str | None:
        args = list(scenario_for(cfg, "auto").host_args)
        return args[args.index("--encoder-threads") + 1] if "--encoder-threads" in args else None

    assert threads(LatencyBenchConfig()) is None
    assert threads(LatencyBenchConfig(encoder_threads=6)) == "6"
    assert threads(LatencyBenchConfig(encoder_threads=6, pin_cpus=True)) == "6"


def test_the_hosts_pacer_ceiling_is_its_own_unless_the_bench_is_told() -> None:
    from pyrofling.bench.latency import LatencyBenchConfig, scenario_for

    for mode in ("free", "auto"):
        assert "--max-rate-mbits" not in scenario_for(LatencyBenchConfig(), mode).host_args
        args = list(scenario_for(LatencyBenchConfig(max_rate_mbits=1000.0), mode).host_args)
        assert args[args.index("--max-rate-mbits") + 1] == "1000"


def test_the_viewers_decode_threads_are_its_own_unless_the_bench_is_told() -> None:
    from pyrofling.bench.latency import LatencyBenchConfig, scenario_for

    for mode in ("free", "auto"):
        assert "--decode-threads" not in scenario_for(LatencyBenchConfig(), mode).view_args
        args = list(scenario_for(LatencyBenchConfig(decode_threads=7), mode).view_args)
        assert args[args.index("--decode-threads") + 1] == "7"
        assert "--decode-threads" not in scenario_for(LatencyBenchConfig(decode_threads=7), mode).host_args


def test_the_latency_bench_times_the_pictures_without_the_scene_check_that_bench_stream_judges_them_by() -> None:
    """The check renders and compares the scene on the decode thread before a picture is ready: timed with it."""
    from pyrofling.bench.latency import LatencyBenchConfig, scenario_for
    from pyrofling.bench.stream import StreamScenario

    assert all(not scenario_for(LatencyBenchConfig(), mode).check_scene for mode in ("free", "auto", "reference"))
    assert StreamScenario().check_scene


def test_the_benchs_viewers_rewrite_their_statistics_each_second_only_for_a_live_line(tmp_path: Any) -> None:
    """A player's viewer writes no statistics while it plays; the bench's wrote them every second for a live line
    that ``bench latency`` does not show, holding the measured viewer's loop 1-3 ms each time."""
    from pyrofling.bench.latency import LatencyBenchConfig, scenario_for
    from pyrofling.bench.stream import viewer_args

    scenario = scenario_for(LatencyBenchConfig(), "auto")
    quiet = viewer_args(scenario, 0, 9000, tmp_path / "v.json", live=False)
    assert "--stats-interval" not in quiet and quiet[quiet.index("--stats-json") + 1] == str(tmp_path / "v.json")
    assert quiet[:2] == ["view", "pyro://127.0.0.1:9000"] and "--headless" in quiet
    assert all(arg in quiet for arg in scenario.view_args)  # the measured viewer's own (its offset rule)
    shown = viewer_args(scenario, 0, 9000, tmp_path / "v.json", live=True)
    assert shown[shown.index("--stats-interval") + 1] == "1"
    other = viewer_args(scenario, 1, 9001, tmp_path / "w.json", live=False)
    assert "--headless" in other and not any(arg in other for arg in scenario.view_args if arg.startswith("--"))


def test_profiles_name_a_size_a_rate_a_display_and_a_bitrate_and_a_bad_one_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pyrofling.bench.latency_profiles import Profile, parse_profile
    from pyrofling.cli import main

    assert parse_profile("1280x720@144/143.86:20000") == Profile(1280, 720, 144, 143.86, 20000)
    assert parse_profile("960x540@144") == Profile(960, 540, 144, 143.86, 10000)  # the display 1/1.001 slower
    assert parse_profile("1920x1080@120:30000").refresh_hz == 119.88
    for bad in ("720p144", "1280x720", "1281x720@60", "1280x720@0", "1280x720@60:-5"):
        with pytest.raises(ValueError):
            parse_profile(bad)
    assert main(["bench", "latency", "--profiles", "1280x720@60,720p144"]) == 2
    assert "WIDTHxHEIGHT@FPS" in capsys.readouterr().err


def test_a_profiles_summary_sets_automatic_against_free_running() -> None:
    from pyrofling.bench.latency_profiles import summary

    rows = [
        {"mode": "free", "glass_ms_median": 9.0, "repeated": 136, "dropped": 139, "decoded_ms_median": 4.0,
         "host_cpu_pct": 40.0},
        {"mode": "auto", "glass_ms_median": 10.8, "repeats_per_minute": 0.0, "ready_ms_median": 5.0,
         "ready_ms_tail": 8.0, "decoded_ms_median": 4.1, "host_cpu_pct": 41.0, "late_pictures": None},
    ]  # fmt: skip
    s = summary({"profile": "960x540@144", "rows": rows})
    assert s["auto_minus_free_ms"] == pytest.approx(1.8) and s["free_repeated"] == 136
    assert (s["ready_ms_median"], s["ready_ms_tail"], s["host_cpu_pct"]) == (5.0, 8.0, 41.0)
    assert summary({"profile": "x", "rows": rows[:1]})["auto_minus_free_ms"] is None


def test_the_profiles_table_says_where_the_lock_was_outrun_and_splits_the_host_and_viewer_cpu_by_thread() -> None:
    from pyrofling.bench.latency_profiles import format_profiles, format_thread_split, summary

    split = {"native": 60.2, "MainThread": 10.4, "pyrofling-encode": 11.0, "pyrofling-audio-tone": 3.0,
             "pyrofling-heartbeat": 0.3, "asyncio": 0.1}  # fmt: skip
    assert format_thread_split(split) == "codec threads 60 %, encode 11 %, event loop 10 %, audio 3 %, other 0.4 %"
    assert format_thread_split({}) == "-"
    rows = [
        {"mode": "free", "glass_ms_median": 12.5, "repeated": 240, "dropped": 249, "host_cpu_pct": 146.0},
        {"mode": "auto", "glass_ms_median": 12.5, "repeats_per_minute": 2.1, "said_outrun": True,
         "host_cpu_pct": 146.0, "host_cpu_by_thread_pct": split,
         "viewer_cpu_by_thread_pct": {"MainThread": 9.0, "pyrofling-decode": 4.0, "native": 21.0}},
    ]  # fmt: skip
    s = summary({"profile": "1920x1080@120", "rows": rows})
    assert s["auto_said_outrun"] and s["host_cpu_by_thread_pct"] == split
    assert s["viewer_cpu_by_thread_pct"]["native"] == 21.0
    quiet = summary({"profile": "1280x720@60", "rows": [dict(r, said_outrun=False) for r in rows]})
    text = format_profiles({"profiles": [], "summary": [s, quiet]})
    assert "spare (a line in the viewer's log) at: 1920x1080@120\n" in text + "\n"
    assert "1280x720@60" not in text.split("at: ")[1].splitlines()[0]
    assert "  1920x1080@120: codec threads 60 %, encode 11 %, event loop 10 %" in text
    viewer = text.split("the viewer's CPU by thread (a core = 100 %):\n")[1]
    assert viewer.startswith("  1920x1080@120: codec threads 21 %, event loop 9 %, decode 4 %")


def test_pooled_rounds_average_the_hosts_cpu_and_keep_an_outrun_said_in_any() -> None:
    from pyrofling.bench.latency import pool

    def part(cpu: float, loop: float, outrun: bool) -> dict[str, Any]:
        return {"frames_encoded": 1, "host_skipped": 0, "presented": 1, "repeated": 0, "missed_deadlines": 0,
                "dropped": 0, "packets_lost": 0, "presentation": "free", "glass_ms": [10.0], "ready_ms": [5.0],
                "refresh_hz": 60.0, "bound_repeats_per_minute": 0.5, "flip_margin_ms": 1.0, "decoded_ms_median": 4.0,
                "host_cpu_pct": cpu, "host_cpu_by_thread_pct": {"MainThread": loop}, "said_outrun": outrun,
                "viewer_cpu_by_thread_pct": {"pyrofling-decode": loop / 2}, "pictures_decoded_early": 3,
                "parts_decoded": 7}  # fmt: skip

    row = pool([part(80.0, 10.0, False), part(90.0, 12.0, True)])
    assert (row["pictures_decoded_early"], row["parts_decoded"]) == (6, 14)
    assert row["host_cpu_pct"] == pytest.approx(85.0)
    assert row["host_cpu_by_thread_pct"] == {"MainThread": pytest.approx(11.0)}
    assert row["viewer_cpu_by_thread_pct"] == {"pyrofling-decode": pytest.approx(5.5)}
    assert row["said_outrun"] is True


def test_the_early_decoding_runs_take_the_hosts_small_slices_unless_told_its_own() -> None:
    from pyrofling.bench.latency import LatencyBenchConfig, runs
    from pyrofling.core.slices import SMALL_SLICE_BYTES

    def early(cfg: LatencyBenchConfig) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
        return [(label, s.host_args, s.view_args) for label, _, s in runs(cfg) if label.endswith(" early")]

    small = early(LatencyBenchConfig(modes=("free", "auto"), also_early_decode=True))
    assert [label for label, _, _ in small] == ["free early", "auto early"]
    for _, host, view in small:
        assert f"slice-max-size={SMALL_SLICE_BYTES}" in host and "--early-decode" in view
    for _, host, view in early(LatencyBenchConfig(modes=("free",), also_early_decode=True, early_slice_bytes=0)):
        assert "--encoder-params" not in host and "--early-decode" in view
    assert early(LatencyBenchConfig(modes=("free",))) == []
    whole = [(label, s.host_args, s.view_args) for label, _, s in runs(LatencyBenchConfig(also_whole_pictures=True))]
    whole = [w for w in whole if w[0].endswith(" whole")]
    assert [label for label, _, _ in whole] == ["free whole", "auto whole"]
    for _, host, view in whole:
        assert "slice-max-size=0" in host and "--no-early-decode" in view
