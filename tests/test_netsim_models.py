import itertools
import random

import pytest

from pyrofling.netsim import GilbertElliottLoss, IidLoss, Impairment, ImpairmentConfig, TraceLoss
from pyrofling.netsim.models import BytePacer, LinkChange, Outages


def test_iid_loss_rate_and_seeding() -> None:
    a = IidLoss(0.05, rng=random.Random(1))
    b = IidLoss(0.05, rng=random.Random(1))
    draws = [a.lose() for _ in range(40_000)]
    assert draws == [b.lose() for _ in range(40_000)]
    assert sum(draws) / len(draws) == pytest.approx(0.05, abs=0.005)


def test_gilbert_elliott_is_bursty_with_the_stationary_rate() -> None:
    ge = GilbertElliottLoss(rng=random.Random(2))
    draws = [ge.lose() for _ in range(300_000)]
    rate = sum(draws) / len(draws)
    assert rate == pytest.approx(ge.mean_loss, rel=0.1)
    assert ge.mean_loss == pytest.approx(0.01 / 0.31 * 0.5)
    # Bursty: a loss is far more likely right after a loss than on average.
    after_loss = [b for a, b in itertools.pairwise(draws) if a]
    assert sum(after_loss) / len(after_loss) > 5 * rate


def test_trace_replays_and_cycles() -> None:
    t = TraceLoss(TraceLoss.parse("# a recorded pattern\n0 0 1\n1,0\n"))
    assert [t.lose() for _ in range(10)] == [False, False, True, True, False] * 2
    with pytest.raises(ValueError, match=r"trace\.txt:2: a loss trace holds only 0 and 1"):
        TraceLoss.parse("0\n01x", name="trace.txt")
    with pytest.raises(ValueError, match="empty"):
        TraceLoss.parse("# nothing\n")


def test_rate_cap_serializes_and_tail_drops() -> None:
    imp = Impairment(ImpairmentConfig(rate_bits_per_s=8_000_000, queue_bytes=10_000))  # 1 MB/s
    times = [imp.process(0.0, 1000) for _ in range(15)]
    sent = [t[0] for t in times if t]
    assert sent == pytest.approx([0.001 * (i + 1) for i in range(10)])
    assert imp.stats.dropped_queue == 5
    assert imp.process(1.0, 1000) == [pytest.approx(1.001)]  # queue drained meanwhile


def test_delay_jitter_reorder_duplicate_are_counted() -> None:
    cfg = ImpairmentConfig(delay_s=0.02, jitter_s=0.005, duplicate=0.1, reorder=0.05)
    imp = Impairment(cfg, seed=3)
    out = [imp.process(i * 0.001, 100) for i in range(5000)]
    assert all(t >= i * 0.001 + 0.02 for i, ts in enumerate(out) for t in ts)
    s = imp.stats
    assert s.duplicated == pytest.approx(500, rel=0.2)
    assert s.reordered > 100
    assert s.forwarded == 5000 + s.duplicated
    assert s.as_dict()["dropped"] == 0


def test_invalid_probabilities_are_refused() -> None:
    with pytest.raises(ValueError):
        IidLoss(1.5, rng=random.Random())
    with pytest.raises(ValueError):
        GilbertElliottLoss(p_good_bad=-0.1, rng=random.Random())


def test_outages_drop_everything_for_their_length_at_random_times() -> None:
    imp = Impairment(ImpairmentConfig(outages=(0.5, 0.01, 0.01)), seed=3)
    down = [not imp.process(i * 0.0001, 1000) for i in range(600_000)]  # 60 s, a datagram every 0.1 ms
    runs, current = [], 0
    for d in down:
        if d:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    assert 90 <= len(runs) <= 150  # about one every 0.5 s
    assert all(99 <= r <= 101 for r in runs)  # 10 ms each: everything in it is dropped
    stats = imp.stats.as_dict()
    assert stats["dropped_outage"] == sum(down) and stats["outages"] == len(runs)


def test_outages_are_seeded_and_checked() -> None:
    def pattern(seed: int) -> list[bool]:
        imp = Impairment(ImpairmentConfig(outages=(0.1, 0.005, 0.02)), seed=seed)
        return [bool(imp.process(i * 0.001, 100)) for i in range(5000)]

    assert pattern(1) == pattern(1) and pattern(1) != pattern(2)
    for bad in ((0.0, 0.01, 0.01), (1.0, 0.0, 0.01), (1.0, 0.02, 0.01)):
        with pytest.raises(ValueError):
            Outages(*bad, rng=random.Random(1))


def test_a_schedule_parses_from_text_and_says_what_is_wrong() -> None:
    steps = LinkChange.parse_schedule("10 rate-mbits=4 queue-ms=50; 30s rate-mbits=10\n# done\n45 loss=2%")
    assert [s.at_s for s in steps] == [10.0, 30.0, 45.0]
    assert steps[0].changes == (("rate_bits_per_s", 4e6), ("queue_s", pytest.approx(0.05)))
    assert steps[2].changes == (("loss", pytest.approx(0.02)),)
    assert steps[0].describe() == "10 s: rate-mbits=4 queue-ms=50"
    for text, says in (
        ("rate-mbits=4", "starts with its time"),
        ("10", "say what changes"),
        ("10 speed=4", "unknown key 'speed'"),
        ("10 rate-mbits=fast", "needs a number"),
        ("10 loss=1.5", "out of range"),
        ("30 rate-mbits=4; 10 rate-mbits=10", "time order"),
        ("# nothing", "no steps"),
    ):
        with pytest.raises(ValueError, match=says):
            LinkChange.parse_schedule(text)


def test_the_link_follows_its_schedule_rate_and_a_queue_sized_in_time() -> None:
    """10 -> 4 -> 10 Mbit/s with a 50 ms queue: departures space out at the new rate, the queue holds 50 ms of
    it (25 kB at 4 Mbit/s), and the link is fast again after the last step."""
    steps = LinkChange.parse_schedule("0 rate-mbits=10 queue-ms=50; 1 rate-mbits=4; 2 rate-mbits=10")
    imp = Impairment(ImpairmentConfig(schedule=steps))
    imp.start(0.0)
    first = imp.process(0.5, 1250)
    assert first == [pytest.approx(0.5 + 1250 * 8 / 10e6)]
    assert imp.queue_limit_bytes == 62_500
    # At 4 Mbit/s, a burst of 60 datagrams of 1250 bytes: 20 fit in the 25 kB queue, the rest are dropped.
    out = [imp.process(1.5, 1250) for _ in range(60)]
    kept = [t[0] for t in out if t]
    assert imp.queue_limit_bytes == 25_000
    assert len(kept) == 20 and imp.stats.dropped_queue == 40
    assert kept[1] - kept[0] == pytest.approx(1250 * 8 / 4e6)
    assert imp.process(2.5, 1250) == [pytest.approx(2.5 + 1250 * 8 / 10e6)]
    assert [t for t, _ in imp.applied] == [0.5, 1.5, 2.5]


def test_a_loss_step_turns_loss_on_and_off() -> None:
    imp = Impairment(ImpairmentConfig(schedule=LinkChange.parse_schedule("1 loss=0.5; 2 loss=0")), seed=3)
    imp.start(0.0)
    before = sum(not imp.process(0.5, 100) for _ in range(1000))
    during = sum(not imp.process(1.5, 100) for _ in range(1000))
    after = sum(not imp.process(2.5, 100) for _ in range(1000))
    assert before == 0 and after == 0
    assert 400 < during < 600


def test_gaussian_delay_variation_has_its_sigma_keeps_order_and_is_shared_by_a_burst() -> None:
    imp = Impairment(ImpairmentConfig(delay_s=0.012, delay_sigma_s=0.003), seed=5)
    frames = []
    departures = []
    for frame in range(3000):  # 60 frames a second, 10 datagrams 0.1 ms apart each
        t0 = frame / 60
        delays = []
        for k in range(10):
            now = t0 + k * 1e-4
            (depart,) = imp.process(now, 1200)
            departures.append(depart)
            delays.append(depart - now)
        frames.append(max(delays))
    assert departures == sorted(departures)  # a queue keeps its order
    assert imp.stats.reordered == 0
    mean = sum(frames) / len(frames)
    sigma = (sum((d - mean) ** 2 for d in frames) / len(frames)) ** 0.5
    assert 0.0115 < mean < 0.0135  # around --delay-ms (a burst's last datagram: a little more)
    assert 0.0025 < sigma < 0.0035  # the frame as a whole sees the σ asked for, not a max of ten draws
    assert min(frames) >= 0.0


def test_a_byte_stream_crosses_the_bottleneck_at_its_rate_and_an_idle_link_starts_afresh() -> None:
    pacer = BytePacer(8e6)  # a megabyte a second
    assert pacer.crossed_at(10_000, 5.0) == pytest.approx(5.01)
    assert pacer.crossed_at(10_000, 5.0) == pytest.approx(5.02)  # behind the first
    assert pacer.crossed_at(20_000, 5.015) == pytest.approx(5.04)
    assert pacer.crossed_at(1_000, 9.0) == pytest.approx(9.001)  # the queue drained meanwhile
