"""The presenter shell in virtual time: pictures arrive when the test says, the refresh clock and every wait run
on a :class:`~pyrofling.clocks.VirtualClock`, so each refresh is judged exactly, however busy the machine."""

from __future__ import annotations

import functools
import json
import statistics
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pyrofling.client.presenter import HeadlessDisplay, Picture, Presenter
from pyrofling.clocks import VirtualClock
from pyrofling.core.viewer.presentation import PresentationConfig

PERIOD = 1 / 60


def presenter(config: PresentationConfig, clock: VirtualClock, **kwargs: object) -> Presenter:
    kwargs.setdefault("display", HeadlessDisplay())
    return Presenter(config, refresh_hz=60.0, clock=clock, **kwargs)  # type: ignore[arg-type]


def feed(
    p: Presenter, clock: VirtualClock, count: int, *, start_s: float, lag_s: float = 0.010, phase_s: float = 0.0
) -> None:
    """A decoder handing over one picture a refresh from ``start_s``, each ``lag_s`` after its capture.  The
    presenter starts its refresh clock at the first picture; the others come ``phase_s`` after a refresh."""

    def decoded(i: int, at: float) -> Callable[[], None]:
        return lambda: p.submit(Picture(None, i, at, capture_s=at - lag_s, frame_id=i))

    for i in range(count):
        at = start_s + i * PERIOD + (phase_s if i else 0.0)
        clock.at(at, decoded(i, at))


def run(p: Presenter, clock: VirtualClock, until_s: float) -> None:
    stop = threading.Event()
    clock.at(until_s, stop.set)
    p.run(stop)


def test_phase_locked_presenter_shows_every_picture_once_and_reports_every_phase_error() -> None:
    clock = VirtualClock(100.0)
    errors: list[int] = []
    p = presenter(PresentationConfig(phase_locked=True, deadline_s=0.008), clock, on_phase_error=errors.append)
    feed(p, clock, 45, start_s=100.0, phase_s=0.004)
    run(p, clock, 100.0 + 45 * PERIOD + 0.3)
    s = p.summary()
    assert s["refresh_hz"] == 60.0 and s["refresh_clock"] == "software"
    # One picture a refresh, each 4 ms after its refresh (inside the 8 ms deadline): each shown once, but the
    # first, which the second replaced within that deadline at the first refresh.
    assert s["presented"] == 44 and s["dropped"] == 1
    assert errors == [-4000] * 44 and s["phase_offsets_sent"] == 44  # "deliver 4 ms earlier", every refresh
    # Shown at the refresh after the one it was for: 10 ms lag + a refresh - the 4 ms it came after it.
    assert s["glass_ms"] == pytest.approx([10 + 1000 * PERIOD - 4] * 44)
    # Every picture's capture → ready time, and when (since the presenter started).
    assert [ms for _, ms in s["ready_trace"]] == pytest.approx([10.0] * 45)
    assert [t for t, _ in s["ready_trace"]] == pytest.approx(
        [i * PERIOD + 0.004 * bool(i) for i in range(45)], abs=1e-4
    )
    # After the last picture every refresh repeats it: 0.3 s of them.
    assert s["repeated"] == pytest.approx(0.3 / PERIOD, abs=1)
    live = p.summary(samples=False)
    assert not {"glass_ms", "ready_trace", "phase_trace", "repeat_times"} & live.keys()
    assert live["glass_ms_median"] == pytest.approx(statistics.median(s["glass_ms"]))
    assert live["presented"] == s["presented"]


def test_free_running_presenter_sends_nothing_and_a_skewed_clock_is_reported() -> None:
    clock = VirtualClock(0.0)
    errors: list[int] = []
    p = Presenter(
        PresentationConfig(),
        HeadlessDisplay(),
        refresh_hz=60.0,
        skew_ppm=1000,
        on_phase_error=errors.append,
        clock=clock,
    )
    feed(p, clock, 20, start_s=0.0)
    run(p, clock, 20 * PERIOD + 0.1)
    s = p.summary()
    assert errors == [] and s["phase_offsets_sent"] == 0
    assert abs(s["refresh_hz"] - 60 / 1.001) < 1e-9
    assert s["presented"] + s["dropped"] == 20 and len(s["phase_trace"]) == s["presented"]  # measured, not sent


class VsyncDisplay(HeadlessDisplay):
    """A display whose flip waits for its refresh (every ``PERIOD`` from 0 on the virtual clock), as a window's
    does with vsync: the picture flipped is on screen from that refresh, which it records."""

    vsync_blocks = True
    refresh_hz: float | None = 60.0

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.shown: list[tuple[float, Picture]] = []

    def present(self, picture: Picture | None) -> None:
        refresh = (int(self.clock.now() / PERIOD + 1e-6) + 1) * PERIOD
        self.clock.advance(refresh - self.clock.now())
        if picture is not None:
            self.shown.append((refresh, picture))


def test_free_running_on_a_display_that_waits_for_the_flip_shows_a_picture_at_the_next_refresh() -> None:
    """Each picture ready 4 ms after a refresh is picked a flip lead before the next one and shown at it (10 ms
    after its capture, then 12.7 ms of waiting); picked at the refresh that follows the flip, as free-running
    once did, the flip showed it a refresh later still.  The glass the presenter reports is the display's."""
    clock = VirtualClock(0.0)
    display = VsyncDisplay(clock)
    p = Presenter(PresentationConfig(), display, clock=clock)
    feed(p, clock, 30, start_s=0.004)
    run(p, clock, 31 * PERIOD)
    s = p.summary()
    assert s["refresh_clock"] == "vsync"
    seen = [(at - picture.capture_s) * 1000 for at, picture in display.shown if picture.capture_s is not None]
    assert len(seen) >= 28
    assert seen[1:] == pytest.approx([10 + 1000 * PERIOD - 4] * (len(seen) - 1), abs=1e-6)
    assert s["glass_ms"][1:] == pytest.approx(seen[1:], abs=1e-6)
    assert s["repeated"] <= 1


def test_a_minute_at_144_hz_keeps_every_refreshs_samples_from_the_start() -> None:
    """Two minutes of samples at the display's rate: at 144 Hz a minute's run keeps its first second too (the
    samples once held 7,200, 50 s there, and a bench read the lock as coming 10 s in)."""
    clock = VirtualClock(0.0)
    hz = 144.0
    p = Presenter(PresentationConfig(), HeadlessDisplay(), refresh_hz=hz, clock=clock)

    def decoded(i: int, at: float) -> Callable[[], None]:
        return lambda: p.submit(Picture(None, i, at, capture_s=at - 0.005, frame_id=i))

    for i in range(int(60 * hz)):
        at = 0.002 + i / hz
        clock.at(at, decoded(i, at))
    run(p, clock, 60.0)
    s = p.summary()
    assert s["presented"] > 8500
    assert len(s["phase_trace"]) == s["presented"] and s["phase_trace"][0][0] < 0.1
    assert len(s["glass_ms"]) == s["presented"] and s["ready_trace"][0][0] < 0.1


def test_presenter_stops_promptly_before_any_picture() -> None:
    clock = VirtualClock(0.0)
    p = presenter(PresentationConfig(phase_locked=True), clock)
    run(p, clock, 0.1)
    assert p.summary()["presented"] == 0 and clock.now() == pytest.approx(0.1)  # at the stop, not a poll later


def test_submit_never_blocks_and_drops_the_oldest_when_the_presenter_is_stuck() -> None:
    p = Presenter(PresentationConfig(), HeadlessDisplay(), max_pending=4)
    for i in range(10):
        p.submit(Picture(None, i, float(i), None, None))
    assert p.summary()["dropped"] == 6


class StallingDisplay(HeadlessDisplay):
    """Holds the presenter up once for ``stall_s`` (a busy machine), at its ``at``-th refresh."""

    def __init__(self, clock: VirtualClock, at: int, stall_s: float) -> None:
        self.clock, self.calls = clock, 0
        self.at, self.stall_s = at, stall_s

    def present(self, picture: Picture | None) -> None:
        self.calls += 1
        if self.calls == self.at:
            self.clock.advance(self.stall_s)


def test_refreshes_the_presenter_was_too_late_for_count_as_repeated() -> None:
    clock = VirtualClock(0.0)
    p = presenter(PresentationConfig.automatic(), clock, display=StallingDisplay(clock, at=20, stall_s=0.1))
    feed(p, clock, 45, start_s=0.0)
    run(p, clock, 45 * PERIOD + 0.05)
    s = p.summary()
    # Held up 100 ms (six refresh periods) at one refresh: the five after it went by undecided, and repeated.
    assert s["skipped_refreshes"] == 5
    assert s["repeated"] >= s["skipped_refreshes"] and len(s["repeat_times"]) == s["repeated"]


def test_the_frame_trace_says_when_each_picture_was_ready_against_its_target(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    clock = VirtualClock(0.0)
    p = presenter(PresentationConfig.automatic(), clock, frame_trace=path.open("w"))
    feed(p, clock, 30, start_s=0.0)
    run(p, clock, 30 * PERIOD + 0.1)
    p.close_trace()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    # (Runs of the collector, recorded once a command in this process tuned it, are lines of their own.)
    shown = [r for r in lines if not r.get("miss") and not r.get("dropped_picture") and "gc" not in r]
    assert len(shown) == p.summary()["presented"] >= 25
    for r in shown:
        assert r["offset"] < r["deadline"] < PERIOD  # the automatic offset, ahead of its deadline
        raw = r["done"] - (r["vblank"] + r["offset"])
        if raw >= -PERIOD / 2:  # for this refresh: as late as it was (folded, a late one would look early)
            assert r["late"] == pytest.approx(raw, abs=1e-6) and raw < PERIOD
        else:  # left over from an earlier refresh: the folded phase error's
            assert abs(r["late"]) <= PERIOD / 2 + 1e-6 and min(abs(r["late"] - raw - k * PERIOD) for k in (1, 2)) < 1e-5
        assert r["picked"] >= r["vblank"] and r["on_screen"] == pytest.approx(r["vblank"] + PERIOD)


def test_the_frame_trace_says_when_a_dropped_picture_came_and_when_the_presenter_saw_it(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    clock = VirtualClock(0.0)
    p = presenter(PresentationConfig.automatic(), clock, frame_trace=path.open("w"))

    def pair(i: int, at: float) -> None:  # pictures in pairs: one of each pair is dropped
        for j in (0, 1):
            p.submit(Picture(None, 2 * i + j, at, capture_s=at - 0.01, frame_id=2 * i + j))

    for i in range(20):
        clock.at(i * 2 * PERIOD, functools.partial(pair, i, i * 2 * PERIOD))
    run(p, clock, 40 * PERIOD + 0.1)
    p.close_trace()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    dropped = [r for r in lines if r.get("dropped_picture")]
    assert len(dropped) == p.summary()["dropped"] == 20
    for r in dropped:
        assert r["seen"] >= r["done"] - 1e-6 and r["capture"] == pytest.approx(r["done"] - 0.01)


def test_live_figures_cover_the_last_samples_and_sort_them_outside_the_decode_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pyrofling.client.video as video
    from pyrofling.core.samples import LIVE_SAMPLES, SAMPLES_KEPT

    presenter = Presenter(PresentationConfig(), HeadlessDisplay(), refresh_hz=60.0)
    pipeline = video.VideoPipeline(presenter, HeadlessDisplay(), on_decode_error=lambda: None)
    # A long run: latencies of 50 ms, then the last LIVE_SAMPLES at 10 ms.
    pipeline.stats.latency_ms.extend([50.0] * (SAMPLES_KEPT - LIVE_SAMPLES) + [10.0] * LIVE_SAMPLES)
    presenter.stats.glass_ms.extend([60.0] * 3000 + [20.0] * LIVE_SAMPLES)
    assert pipeline.summary(samples=True)["latency_ms_median"] == 50.0  # the final figures: every sample kept
    sort = video.median_and_p95

    def unlocked(values: list[float]) -> tuple[float | None, float | None]:
        assert not pipeline.lock.locked(), "the decode thread would wait while this sorts"
        return sort(values)

    monkeypatch.setattr(video, "median_and_p95", unlocked)
    live = pipeline.summary(streaming=True, samples=False)
    assert live["latency_ms_median"] == 10.0 and live["latency_ms_p95"] == 10.0
    assert presenter.summary(samples=False)["glass_ms_median"] == 20.0
    assert presenter.summary()["glass_ms_median"] == 60.0


@pytest.mark.io
def test_a_streams_decoder_and_scene_checker_are_ready_before_its_first_packet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Opening the decoder (6-13 ms) and building the scene checker (26 ms at 720p) used to hold up the
    stream's first picture: they are done on the decode thread as soon as the stream's parameters come."""
    import pyrofling.client.video as video
    from pyrofling.wire import VideoCodec

    opened: list[VideoCodec] = []
    real_decoder = video.VideoDecoder

    def counting_decoder(codec: VideoCodec, **kw: Any) -> Any:
        opened.append(codec)
        return real_decoder(codec, **kw)

    monkeypatch.setattr(video, "VideoDecoder", counting_decoder)
    presenter = Presenter(PresentationConfig(), HeadlessDisplay(), refresh_hz=60.0)
    pipeline = video.VideoPipeline(presenter, HeadlessDisplay(), on_decode_error=lambda: None, check_scene=True)
    pipeline.start()
    pipeline.expect(VideoCodec.H264, 320, 240)
    pipeline.expect(VideoCodec.H264, 320, 240)  # a reconnect to the same stream: nothing new to open
    pipeline.close()  # returns once the thread has taken everything queued
    assert opened == [VideoCodec.H264]
    assert pipeline._scene is not None and (pipeline._scene.width, pipeline._scene.height) == (320, 240)


@pytest.mark.io
def test_a_real_time_decoder_that_fills_its_cpu_is_stepped_down_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyrofling.client.video as video
    from pyrofling.client.codecs import VideoDecoder
    from pyrofling.core.viewer.clock_sync import HostClock
    from pyrofling.core.viewer.connection import DecodeVideo
    from pyrofling.runtime import THREAD_PRIORITIES
    from pyrofling.wire import VideoCodec

    # The system's side, recorded: what matters here is when the decode thread asks for the step down.
    stepped: list[str] = []

    def step_down(role: str) -> int:
        stepped.append(role)
        return 1

    monkeypatch.setitem(THREAD_PRIORITIES.granted, "decoder", "real-time")
    monkeypatch.setattr(THREAD_PRIORITIES, "step_down", step_down)

    class SlowDecoder(VideoDecoder):
        """A picture too large for this CPU: each packet takes 30 ms to decode."""

        def decode(self, data: bytes, pts_us: int) -> list[Any]:
            threading.Event().wait(0.03)
            return []

    monkeypatch.setattr(video, "VideoDecoder", SlowDecoder)
    presenter = Presenter(PresentationConfig(), HeadlessDisplay(), refresh_hz=60.0)
    pipeline = video.VideoPipeline(presenter, HeadlessDisplay(), on_decode_error=lambda: None, max_queue=64)
    pipeline.start()
    clock = HostClock()
    for i in range(60):  # 1.8 s of decoding, packets always waiting: the thread busy all the time
        packet = DecodeVideo(b"\0\0\0\1", i * 16_667, True, 0.0, VideoCodec.H264)
        assert pipeline.offer(packet, clock, 1, 0.0)
    pipeline.close(timeout_s=60)  # returns once the thread has taken everything queued
    assert stepped == ["decoder"]
    assert pipeline.cpu_share.share_at_step_down is not None and pipeline.cpu_share.share_at_step_down > 0.5


def test_where_the_lock_cannot_cover_the_tail_on_a_fast_display_it_says_so_once_and_names_half_the_rate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from dataclasses import replace

    from pyrofling.core.viewer.presentation import PresentationLoop

    p = Presenter(PresentationConfig.automatic(), HeadlessDisplay(), refresh_hz=143.86, clock=VirtualClock(0.0))
    for cadence, says_half in ((1, True), (2, False)):
        p._said_outrun = False
        loop: PresentationLoop[Picture] = PresentationLoop(p.config, 1 / 143.86, cadence=cadence)
        assert loop.auto is not None
        outrun = replace(loop.auto.state(), wanted_margin_ms=9.4)
        loop.auto.state = lambda outrun=outrun: outrun  # type: ignore[method-assign,misc]
        caplog.clear()
        with caplog.at_level("INFO", logger="pyrofling.client.presenter"):
            p._log_offset(loop)
            p._log_offset(loop)
        said = [r.getMessage() for r in caplog.records if "spread wider than a lock can spare" in r.getMessage()]
        assert len(said) == 1 and "their tail asks 9.4 ms" in said[0]
        assert ("host --fps 72 shows each one two refreshes" in said[0]) == says_half, said[0]


def test_a_stream_at_half_the_displays_rate_is_held_not_repeated_and_the_presenter_follows_its_rate() -> None:
    """72 pictures a second on a 143.86 Hz display for 2 s: each stays two refreshes, held; the same pictures from
    a stream whose rate is not known (or not a divisor) count every other refresh as a repeat."""
    results = {}
    rates: tuple[tuple[str, float | None], ...] = (("72 fps", 72.0), ("unknown", None))
    for name, rate in rates:
        clock = VirtualClock(0.0)
        stream_hz = functools.partial(lambda r: r, rate)
        p = Presenter(PresentationConfig(), HeadlessDisplay(), refresh_hz=143.86, clock=clock, stream_hz=stream_hz)

        def decoded(i: int, at: float, p: Presenter = p) -> Callable[[], None]:
            return lambda: p.submit(Picture(None, i, at, capture_s=at - 0.005, frame_id=i))

        for i in range(144):
            at = 0.003 + i / 72.0
            clock.at(at, decoded(i, at))
        run(p, clock, 2.0)
        results[name] = p.summary()
    held, unknown = results["72 fps"], results["unknown"]
    assert held["presented"] >= 140 and held["held_by_cadence"] >= 139 and held["repeated"] <= 1
    assert unknown["held_by_cadence"] == 0 and unknown["repeated"] >= 139


def test_a_lock_outrun_on_a_fast_display_asks_the_host_for_half_once_and_only_a_viewer_allowed_to_asks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """143.86 Hz, the automatic lock outrun (its tail asks more margin than it can spare) and one refresh in 20
    repeating: a settle and a window in, the presenter asks for half the rate once and says so; a presenter that
    was given nowhere to ask (``view --picture-rate full``) names ``host --fps`` instead."""
    from dataclasses import replace

    from pyrofling.core.viewer.presentation import PresentationLoop

    hz = 143.86
    for may_ask in (True, False):
        clock = VirtualClock(0.0)
        said: list[tuple[float, int]] = []
        ask = functools.partial(lambda c, s, mhz: s.append((c.now(), mhz)), clock, said) if may_ask else None
        p = Presenter(PresentationConfig.automatic(), HeadlessDisplay(), refresh_hz=hz, clock=clock,
                      on_picture_rate=ask)  # fmt: skip
        loop: PresentationLoop[Picture] = PresentationLoop(p.config, 1 / hz)
        assert loop.auto is not None
        outrun = replace(loop.auto.state(), wanted_margin_ms=9.4)
        loop.auto.state = lambda outrun=outrun: outrun  # type: ignore[method-assign,misc]
        caplog.clear()
        with caplog.at_level("INFO", logger="pyrofling.client.presenter"):
            for i in range(int(20 * hz)):
                clock.t = i / hz
                loop.counters.repeated += i % 20 == 19
                p._log_offset(loop)
        lines = [r.getMessage() for r in caplog.records]
        if may_ask:
            [(when, mhz)] = said
            assert mhz == 71_930 and 15.0 <= when < 15.1
            assert sum("asking the host for 71.93 pictures a second" in line for line in lines) == 1
            assert any("this viewer asks the host for half the rate" in line for line in lines)
        else:
            assert not any("asking the host" in line for line in lines)
            assert any("host --fps 72 shows each one two refreshes" in line for line in lines)
