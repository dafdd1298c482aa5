"""The presenter shell on real threads and a real clock, with a headless display (generous timeouts)."""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

import pytest

from pyrofling.client.presenter import HeadlessDisplay, Picture, Presenter
from pyrofling.core.viewer.presentation import PresentationConfig


def feed(presenter: Presenter, count: int, hz: float, *, capture_lag_s: float = 0.01) -> None:
    period = 1 / hz
    start = time.monotonic()
    for i in range(count):
        due = start + i * period
        time.sleep(max(0.0, due - time.monotonic()))
        now = time.monotonic()
        presenter.submit(Picture(None, i, now, capture_s=now - capture_lag_s, frame_id=i))


def run_presenter(presenter: Presenter, feeder: threading.Thread, linger_s: float) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=presenter.run, args=(stop,))
    thread.start()
    feeder.start()
    feeder.join(30)
    time.sleep(linger_s)
    stop.set()
    thread.join(10)
    assert not thread.is_alive()


def test_phase_locked_presenter_shows_pictures_and_reports_every_phase_error() -> None:
    errors: list[int] = []
    presenter = Presenter(
        PresentationConfig(phase_locked=True, deadline_s=0.008),
        HeadlessDisplay(),
        refresh_hz=60.0,
        on_phase_error=errors.append,
    )
    run_presenter(presenter, threading.Thread(target=feed, args=(presenter, 45, 60.0)), linger_s=0.3)
    s = presenter.summary()
    assert s["refresh_hz"] == 60.0 and s["refresh_clock"] == "software"
    assert s["presented"] + s["dropped"] >= 40  # a busy machine may drop one, never lose many
    assert len(errors) == s["presented"] == s["phase_offsets_sent"]
    assert all(-8334 <= e <= 8334 for e in errors)  # folded into half a refresh
    assert len(s["glass_ms"]) == s["presented"]
    assert all(10 <= g < 10 + 2 * 16.7 + 20 for g in s["glass_ms"])  # 10 ms lag + at most two refreshes
    # Every picture's capture → ready time, shown or dropped: the feeder's 10 ms lag.
    assert len(s["ready_trace"]) == s["presented"] + s["dropped"]
    assert all(ms == pytest.approx(10, abs=0.01) for _, ms in s["ready_trace"])
    times = [t for t, _ in s["ready_trace"]]
    assert times == sorted(times) and 0 <= times[0] < times[-1] < 2  # since the presenter started
    assert s["repeated"] >= 5  # the 0.3 s after the last picture repeat it
    # The live statistics (written every second) carry the distribution's figures, not every sample.
    live = presenter.summary(samples=False)
    assert not {"glass_ms", "ready_trace", "phase_trace", "repeat_times"} & live.keys()
    assert live["glass_ms_median"] == pytest.approx(statistics.median(s["glass_ms"]))
    assert live["presented"] == s["presented"]


def test_free_running_presenter_sends_nothing_and_a_skewed_clock_is_reported() -> None:
    errors: list[int] = []
    presenter = Presenter(
        PresentationConfig(), HeadlessDisplay(), refresh_hz=60.0, skew_ppm=1000, on_phase_error=errors.append
    )
    run_presenter(presenter, threading.Thread(target=feed, args=(presenter, 20, 60.0)), linger_s=0.1)
    s = presenter.summary()
    assert errors == [] and s["phase_offsets_sent"] == 0
    assert abs(s["refresh_hz"] - 60 / 1.001) < 1e-9
    # The phase is still measured, for the bench (a busy machine may skip a picture or two: newest wins).
    assert s["presented"] + s["dropped"] >= 15 and s["presented"] >= 10 and s["phase_trace"]


def test_presenter_stops_promptly_before_any_picture() -> None:
    presenter = Presenter(PresentationConfig(phase_locked=True), HeadlessDisplay())
    stop = threading.Event()
    thread = threading.Thread(target=presenter.run, args=(stop,))
    thread.start()
    time.sleep(0.1)
    stop.set()
    thread.join(2)
    assert not thread.is_alive() and presenter.summary()["presented"] == 0


def test_submit_never_blocks_and_drops_the_oldest_when_the_presenter_is_stuck() -> None:
    presenter = Presenter(PresentationConfig(), HeadlessDisplay(), max_pending=4)
    for i in range(10):
        presenter.submit(Picture(None, i, float(i), None, None))
    assert presenter.summary()["dropped"] == 6


class StallingDisplay(HeadlessDisplay):
    """Holds the presenter up once for ``stall_s`` (a busy machine), at its ``at``-th refresh."""

    def __init__(self, at: int, stall_s: float) -> None:
        self.calls = 0
        self.at, self.stall_s = at, stall_s

    def present(self, picture: Picture | None) -> None:
        self.calls += 1
        if self.calls == self.at:
            time.sleep(self.stall_s)


def test_refreshes_the_presenter_was_too_late_for_count_as_repeated() -> None:
    presenter = Presenter(PresentationConfig.automatic(), StallingDisplay(at=20, stall_s=0.1), refresh_hz=60.0)
    run_presenter(presenter, threading.Thread(target=feed, args=(presenter, 45, 60.0)), linger_s=0.05)
    s = presenter.summary()
    assert s["skipped_refreshes"] >= 5  # 100 ms held up: five or six refreshes went by undecided
    assert s["repeated"] >= s["skipped_refreshes"]
    assert len(s["repeat_times"]) == s["repeated"]


def test_the_frame_trace_says_when_each_picture_was_ready_against_its_target(tmp_path: Path) -> None:
    import json

    path = tmp_path / "trace.jsonl"
    presenter = Presenter(
        PresentationConfig.automatic(), HeadlessDisplay(), refresh_hz=60.0, frame_trace=path.open("w")
    )
    run_presenter(presenter, threading.Thread(target=feed, args=(presenter, 30, 60.0)), linger_s=0.1)
    presenter.close_trace()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    shown = [r for r in lines if not r.get("miss") and not r.get("dropped_picture")]
    assert len(shown) == presenter.summary()["presented"] >= 20
    for r in shown:
        assert r["offset"] < r["deadline"] < 1 / 60  # the automatic offset, ahead of its deadline
        raw = r["done"] - (r["vblank"] + r["offset"])
        if raw >= -1 / 120:  # for this refresh: as late as it was (folded, a late one would look early)
            assert r["late"] == pytest.approx(raw, abs=1e-6) and raw < 1 / 60
        else:  # left over from an earlier refresh: the folded phase error's
            assert abs(r["late"]) <= 1 / 120 + 1e-6 and min(abs(r["late"] - raw - k / 60) for k in (1, 2)) < 1e-5
        assert r["picked"] >= r["vblank"] and r["on_screen"] == pytest.approx(r["vblank"] + 1 / 60)


def test_the_frame_trace_says_when_a_dropped_picture_came_and_when_the_presenter_saw_it(tmp_path: Path) -> None:
    import json

    path = tmp_path / "trace.jsonl"
    presenter = Presenter(
        PresentationConfig.automatic(), HeadlessDisplay(), refresh_hz=60.0, frame_trace=path.open("w")
    )

    def bursts() -> None:  # pictures in pairs: one of each pair is dropped
        for i in range(20):
            now = time.monotonic()
            for j in (0, 1):
                presenter.submit(Picture(None, 2 * i + j, now, capture_s=now - 0.01, frame_id=2 * i + j))
            time.sleep(2 / 60)

    run_presenter(presenter, threading.Thread(target=bursts), linger_s=0.1)
    presenter.close_trace()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    dropped = [r for r in lines if r.get("dropped_picture")]
    assert len(dropped) == presenter.summary()["dropped"] >= 10
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
    median = statistics.median

    def unlocked_median(values: list[float]) -> float:
        assert not pipeline.lock.locked(), "the decode thread would wait while this sorts"
        return median(values)

    monkeypatch.setattr(video.statistics, "median", unlocked_median)
    live = pipeline.summary(streaming=True, samples=False)
    assert live["latency_ms_median"] == 10.0 and live["latency_ms_p95"] == 10.0
    assert presenter.summary(samples=False)["glass_ms_median"] == 20.0
    assert presenter.summary()["glass_ms_median"] == 60.0
