"""``bench latency``'s lock bound: the lowest glass median a phase lock could reach on a run's pictures."""

from __future__ import annotations

import random

import pytest

from pyrofling.bench.latency import bound_verdict, lock_bound


def test_one_late_picture_a_minute_is_allowed_and_the_bound_is_the_rest_plus_the_flip_margin() -> None:
    # A minute at 60 Hz: 3599 pictures ready 10 ms after capture, one 30 ms after it.
    ready = [10.0] * 3599 + [30.0]
    random.Random(1).shuffle(ready)
    one = lock_bound(ready, 60.0, 1.0, 1.5)
    assert one == {"ready_ms_median": 10.0, "ready_ms_tail": 10.0, "lock_bound_ms": 11.5}
    # Two late pictures in that minute: a lock must cover the second, or it repeats twice.
    two = lock_bound([10.0] * 3598 + [25.0, 30.0], 60.0, 1.0, 1.5)
    assert two["ready_ms_tail"] == 25.0 and two["lock_bound_ms"] == 26.5
    # A higher allowed rate lets both go.
    assert lock_bound([10.0] * 3598 + [25.0, 30.0], 60.0, 2.0, 1.5)["ready_ms_tail"] == 10.0


def test_a_run_shorter_than_the_rate_asks_for_takes_its_latest_picture() -> None:
    ready = [float(v) for v in range(1, 601)]  # 10 s at 60 Hz: no picture may be late at one a minute
    assert lock_bound(ready, 60.0, 1.0, 1.0) == {
        "ready_ms_median": 301.0,
        "ready_ms_tail": 600.0,
        "lock_bound_ms": 601.0,
    }
    assert lock_bound([], 60.0, 1.0, 1.0) == {"ready_ms_median": None, "ready_ms_tail": None, "lock_bound_ms": None}


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
