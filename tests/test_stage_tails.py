"""Each viewer stage's median, p99.9 and once-a-minute tail, the start-up kept apart (pure, virtual time)."""

import pytest

from pyrofling.core.viewer.stage_tails import STAGES, StageTails, share_tail

PERIOD = 1 / 60


def feed(tails: StageTails, i: int, *, decode_ms: float = 1.0, queue_ms: float = 0.1) -> None:
    first = 100.0 + i * PERIOD
    complete = first + 0.0002
    queued = complete + 0.0003
    start = queued + queue_ms / 1000
    decoded = start + decode_ms / 1000
    tails.picture(
        first_s=first, complete_s=complete, queued_s=queued, decode_start_s=start, decoded_s=decoded, done_s=decoded
    )


def test_a_once_a_minute_slow_decode_is_the_tail_and_the_start_up_queue_is_apart() -> None:
    tails = StageTails()
    for i in range(120 + 3600):
        # The decoder's first pictures queue 40 ms; after the start-up one decode a minute takes 9 ms and
        # three take 4 ms.
        slow = 9.0 if i == 2000 else 4.0 if i in (1000, 1500, 2500) else 1.0
        feed(tails, i, decode_ms=slow, queue_ms=40.0 if i < 5 else 0.1)
    s = tails.summary(60.0)
    assert s["pictures"] == 3600
    # From its last datagram to the decoder: 0.3 ms to hand it over, 40 ms in the queue.
    assert s["startup"] == {"seconds": 2.0, "pictures": 120, "worst_queue_ms": pytest.approx(40.3)}
    decode = s["stages"]["decode"]
    assert decode["median_ms"] == pytest.approx(1.0)
    assert decode["once_a_minute_ms"] == pytest.approx(4.0)  # one picture in 3600 may run over it: the 9 ms one
    assert decode["p999_ms"] == pytest.approx(4.0)
    assert s["stages"]["decode queue"]["once_a_minute_ms"] == pytest.approx(0.1)  # the start-up queue is not in it
    assert set(s["stages"]) == set(STAGES)
    # At 30 Hz a minute is 1800 refreshes: two pictures may exceed the tail.
    assert tails.summary(30.0)["stages"]["decode"]["once_a_minute_ms"] == pytest.approx(4.0)


def test_it_remembers_a_bounded_window_and_says_nothing_before_the_first_picture() -> None:
    tails = StageTails(keep=100, startup_s=0.0)
    assert tails.summary(60.0) == {
        "pictures": 0,
        "stages": {},
        "startup": {"seconds": 0.0, "pictures": 0, "worst_queue_ms": None},
    }
    for i in range(500):
        feed(tails, i, decode_ms=5.0 if i < 400 else 1.0)
    s = tails.summary(60.0)
    assert s["pictures"] == 100 and s["stages"]["decode"]["once_a_minute_ms"] == pytest.approx(1.0)


def test_share_tail_lets_the_allowed_share_run_over() -> None:
    assert share_tail([3.0, 1.0, 2.0], 0.0) == 3.0 and share_tail([3.0, 1.0, 2.0], 0.34) == 2.0
