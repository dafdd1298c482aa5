"""``bench spectators``' judging: what a spectator's screen would have shown, from the pictures it decoded."""

from __future__ import annotations

import pytest

from pyrofling.bench.spectators import format_table
from pyrofling.bench.webrtc_spectator import SpectatorLog, judge_spectator

FPS = 60.0
PERIOD = 1 / FPS


def steady(n: int, *, start: float = 10.0, latency: float = 0.025, skip: range = range(0)) -> SpectatorLog:
    """``n`` pictures decoded one a frame period from ``start``, each ``latency`` after its capture."""
    log = SpectatorLog(asked_s=start - 0.3)
    for i in range(n):
        if i not in skip:
            t = start + i * PERIOD + 0.001
            log.pictures.append((t, i, t - latency))
    return log


def test_a_spectator_that_decodes_every_picture_in_time_has_every_refresh_good() -> None:
    judged = judge_spectator(steady(600), FPS)
    assert judged["good_refreshes_pct"] == 100.0 and judged["freezes"] == 0
    assert judged["first_picture_s"] == pytest.approx(0.301)
    assert judged["latency_ms_median"] == pytest.approx(25.0) and judged["pictures"] == 600


def test_pictures_that_never_came_are_a_freeze_and_an_unreadable_one_is_corrupt() -> None:
    log = steady(600, skip=range(300, 312))  # 12 pictures (200 ms) never decoded
    log.pictures.append((log.pictures[100][0] + PERIOD / 2, -1, None))  # and one whose marker did not read
    judged = judge_spectator(log, FPS)
    assert judged["freezes"] == 1 and judged["longest_freeze_ms"] == pytest.approx(9 * 1000 / FPS, abs=20)
    assert judged["unreadable"] == 1
    assert 96.0 < judged["good_refreshes_pct"] < 99.0


def test_a_spectator_that_got_no_picture_says_why() -> None:
    log = SpectatorLog(asked_s=1.0, error="RuntimeError: no mountpoint 4242")
    assert judge_spectator(log, FPS) == {"first_picture_s": None, "pictures": 0,
                                         "error": "RuntimeError: no mountpoint 4242"}  # fmt: skip


def test_the_table_sets_n_spectators_against_one_and_names_a_failure() -> None:
    judged = judge_spectator(steady(600), FPS)

    def run(count: int, cpu: float, failed: int = 0) -> dict[str, object]:
        spectators = [judged] * (count - failed) + [{"pictures": 0, "error": "boom"}] * failed
        overall = {"watched": count - failed, "of": count, "good_refreshes_pct_min": 100.0,
                   "good_refreshes_pct_median": 100.0, "latency_ms_median": 25.0, "latency_ms_max": 25.0,
                   "first_picture_s_max": 0.3, "first_picture_s_median": 0.3}  # fmt: skip
        return {"spectators_asked": count, "spectators": spectators, "overall": overall, "host_cpu_pct": cpu,
                "frames_encoded": 900, "player": {"good_refreshes_pct": 100.0, "glass_ms_median": 11.0}}  # fmt: skip

    table = format_table({"scenario": "360p60", "processes": 2, "sound": False, "host_cpu_change_pct": 2.0,
                          "runs": [run(1, 25.0), run(20, 25.5, failed=1)]})  # fmt: skip
    rows = table.splitlines()
    assert rows[2].split()[:2] == ["1", "1"] and rows[3].split()[:2] == ["20", "19"]
    assert "host CPU with 20 spectators against 1: +2.0 %" in table
    assert "spectators that failed: 1 (boom)" in table and "pictures only" in table


def test_after_janus_came_back_the_time_to_a_picture_again_is_to_the_first_readable_one() -> None:
    log = steady(600, skip=range(200, 400))  # Janus away: 200 pictures never came
    back = log.pictures[150][0] + 2.0  # answering again at frame ~270
    unreadable_at = log.pictures[200][0] - 3 * PERIOD  # a picture whose marker did not read, before the first good
    log.pictures.append((unreadable_at, -1, None))
    judged = judge_spectator(log, FPS, since_s=back)
    assert judged["picture_again_s"] == pytest.approx(log.pictures[200][0] - back)  # frame 400, not the unreadable
    assert judge_spectator(log, FPS)["picture_again_s"] is None  # no outage: nothing to time
