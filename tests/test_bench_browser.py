"""bench browser's judging, pure: the page's refresh log and its key presses against the host's writes."""

import pytest

from pyrofling.bench.browser import input_latencies, judge_refreshes

OFFSET_MS = 1_700_000_000_000.0  # the host's wall clock minus its monotonic clock


def test_the_pages_refreshes_are_judged_as_the_viewers_own() -> None:
    period_ms = 1000 / 60
    log = []
    for i in range(120):  # two seconds: a new picture each refresh, 12 ms old
        t = 5000 + i * period_ms
        log.append([OFFSET_MS + t, i, int((t - 12) * 1000)])
    t0 = 5000 + 120 * period_ms
    still = int((5000 + 119.5 * period_ms - 12) * 1000)  # half a period younger: no age on the 2-frame boundary
    for i in range(6):  # the picture stands still for six refreshes (ages 0.5–5.5 frames): two are allowed
        log.append([OFFSET_MS + t0 + i * period_ms, 119, still])
    log.append([OFFSET_MS + t0 + 6 * period_ms, -1, 0])  # a marker that does not read
    q = judge_refreshes(log, OFFSET_MS, 60)
    assert q["refreshes"] == 127 and q["stale_refreshes"] == 4 and q["corrupt_refreshes"] == 1
    assert q["good_refreshes"] == 122 and q["freezes"] == 1
    assert q["longest_freeze_ms"] == pytest.approx(5 * period_ms)


def test_each_key_is_timed_to_the_hosts_first_write_of_key_events_after_it() -> None:
    dispatched = [10.0, 10.05, 10.10]
    applied = [
        {"t": 10.001, "events": 0},  # a state that changed nothing (a keep-alive) is not the key's write
        {"t": 10.002, "events": 2},
        {"t": 10.053, "events": 2},
        {"t": 10.09, "events": 0},
    ]  # the third key never arrived
    assert input_latencies(dispatched, applied) == pytest.approx([2.0, 3.0])
