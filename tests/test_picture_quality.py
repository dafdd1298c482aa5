"""What the benches judge a refresh by: the scene check and the per-refresh verdicts (pure, numpy)."""

from __future__ import annotations

import numpy as np
import pytest

from pyrofling.core.scene import TestScene
from pyrofling.core.viewer.picture_quality import CLEAN_TILE_ERROR, RefreshQuality, tile_error


def test_a_picture_matches_its_own_frame_and_not_a_neighbour_or_a_damaged_copy() -> None:
    scene = TestScene(640, 360)
    rows = scene.structured_rows()
    frame = scene.render(100, 0)[:360].copy()
    assert tile_error(frame, scene.render(100, 0)[:360], rows) == 0.0
    # Another frame is off (the checker has scrolled on): not clean.
    assert tile_error(frame, scene.render(90, 0)[:360], rows) > CLEAN_TILE_ERROR
    # One 64x64 block of garbage in the bars, as a lost slice leaves it, is enough.
    damaged = frame.copy()
    damaged[300:360, 128:192] = 0
    assert tile_error(damaged, frame, rows) > CLEAN_TILE_ERROR
    # Noise of the size compression leaves everywhere is not.
    noisy = np.clip(frame.astype(np.int16) + np.random.default_rng(1).integers(-3, 4, frame.shape), 0, 255)
    assert tile_error(noisy.astype(np.uint8), frame, rows) < CLEAN_TILE_ERROR


def test_grain_rows_are_left_out() -> None:
    scene = TestScene(640, 360)
    top, bottom = scene.structured_rows()
    assert top[1] <= bottom[0]  # the grain band lies between
    frame = scene.render(5, 0)[:360].copy()
    frame[top[1] : bottom[0]] = 0  # a grain band the encoder smeared entirely
    assert tile_error(frame, scene.render(5, 0)[:360], scene.structured_rows()) == 0.0


def test_refreshes_are_good_corrupt_or_stale_and_a_run_of_bad_ones_is_a_freeze() -> None:
    period = 1 / 60
    q = RefreshQuality(period)
    t = 0.0
    assert q.refresh(t, capture_s=None, clean=None, fresh=False) == "blank"
    for i in range(60):  # a healthy second: a new picture every refresh, 10 ms old
        t = 1 + i * period
        assert q.refresh(t, capture_s=t - 0.010, clean=True, fresh=True) == "good"
    shown = t - 0.010
    kinds = []
    for i in range(1, 7):  # the picture stands still for six refreshes
        kinds.append(q.refresh(t + i * period, capture_s=shown, clean=True, fresh=False))
    assert kinds == ["good", "good", "stale", "stale", "stale", "stale"]
    t += 7 * period
    assert q.refresh(t, capture_s=t - 0.3, clean=False, fresh=True) == "corrupt"  # concealed after loss
    assert q.refresh(t + period, capture_s=t + period - 0.010, clean=True, fresh=True) == "good"
    s = q.summary()
    assert s["good_refreshes"] == 63 and s["stale_refreshes"] == 4 and s["corrupt_refreshes"] == 1
    assert s["blank_refreshes"] == 1 and s["freezes"] == 1
    assert s["longest_freeze_ms"] == pytest.approx(5000 / 60)
    assert s["good_refreshes_pct"] == pytest.approx(100 * 63 / 68)
    # Each lost refresh is logged with when it was, so a bench can place it against what happened then.
    assert [kind for _, kind in s["not_good_log"]] == ["stale"] * 4 + ["corrupt"]
    assert s["not_good_log"][0][0] == pytest.approx(round(1 + 59 * period + 3 * period, 3))


def test_a_single_bad_refresh_is_not_a_freeze() -> None:
    q = RefreshQuality(1 / 60)
    q.refresh(0.0, capture_s=-0.01, clean=True, fresh=True)
    q.refresh(1 / 60, capture_s=None, clean=True, fresh=True)  # marker unreadable: corrupt
    q.refresh(2 / 60, capture_s=2 / 60 - 0.01, clean=True, fresh=True)
    assert q.summary()["freezes"] == 0 and q.summary()["corrupt_refreshes"] == 1
