import itertools

import pytest

from pyrofling.core.host.pacer import (
    UDP_OVERHEAD_BYTES,
    WAKE_BATCH,
    PacedQueue,
    TokenBucketPacer,
    UnpacedPacer,
    make_pacer,
)
from pyrofling.core.host.packetizer import LaterDatagram, MediaPacket, Packetizer
from pyrofling.fec import make_planner


def test_token_bucket_caps_the_rate_after_the_burst() -> None:
    size = 1048
    cost = size + UDP_OVERHEAD_BYTES
    pacer = TokenBucketPacer(rate_bits_per_s=8 * cost * 1000, burst_bytes=2 * cost)  # 1000 datagrams/s
    now = 0.0
    sent_at = []
    for _ in range(10):
        t = pacer.next_send_time(now, size)
        now = max(now, t)
        pacer.on_sent(now, size)
        sent_at.append(now)
    assert sent_at[:2] == [0.0, 0.0]  # the burst
    gaps = [b - a for a, b in itertools.pairwise(sent_at[1:])]
    assert all(g == pytest.approx(0.001) for g in gaps)
    # Idle time refills the bucket, but never beyond the burst.
    assert pacer.next_send_time(now + 10.0, size) == now + 10.0
    pacer.on_sent(now + 10.0, size)
    pacer.on_sent(now + 10.0, size)
    assert pacer.next_send_time(now + 10.0, size) > now + 10.0


def test_paced_queue_releases_in_order_and_refuses_overflow() -> None:
    pacer = TokenBucketPacer(rate_bits_per_s=8 * 1076 * 100, burst_bytes=1500)
    q = PacedQueue(pacer, max_queued_bytes=5000)
    refused = q.push([bytes([i]) * 1048 for i in range(6)])
    assert refused == 2 and len(q) == 4
    now = 0.0
    out = []
    while len(q):
        out += q.pop_due(now)
        t = q.next_timer(now)
        if t is not None:
            assert t > now
            now = t
    assert [d[0] for d in out] == [0, 1, 2, 3]
    # The burst's 424 spare bytes shorten the first wait; then 100 datagrams/s.
    assert now == pytest.approx((3 * 1076 - (1500 - 1076)) / (1076 * 100))
    assert q.next_timer(now) is None


def test_unpaced_and_factory() -> None:
    assert UnpacedPacer().next_send_time(3.0, 10**6) == 3.0
    assert make_pacer("none").name == "none"
    assert make_pacer("token-bucket").name == "token-bucket"
    with pytest.raises(ValueError, match="token-bucket or none"):
        make_pacer("fq")
    with pytest.raises(ValueError):
        TokenBucketPacer(rate_bits_per_s=0)


def test_a_weighted_packet_is_paced_slower_than_the_rest() -> None:
    """A key frame pushed with weight 2 leaves at half the pacer's rate; what follows it at the full rate."""
    pacer = TokenBucketPacer(rate_bits_per_s=8_000_000, burst_bytes=2000)  # 1 MB/s
    q = PacedQueue(pacer)
    q.push([bytes(972)] * 4, weight=2.0)  # 1000 bytes on the wire each, charged 2000
    q.push([bytes(972)] * 4)
    sent: list[float] = []
    for step in range(2000):  # 0.1 ms ticks, as a shell waking on the timer would
        now = step / 10_000
        sent += [now] * len(q.pop_due(now))
    assert len(sent) == 8
    gaps = [b - a for a, b in itertools.pairwise(sent)]
    assert gaps[1] == pytest.approx(0.002, abs=0.0002)  # weighted: 2000 bytes of tokens each
    assert gaps[-1] == pytest.approx(0.001, abs=0.0002)  # the rest at the full rate


def test_a_datagram_costing_more_than_the_burst_still_leaves() -> None:
    pacer = TokenBucketPacer(rate_bits_per_s=8_000_000, burst_bytes=1500)
    q = PacedQueue(pacer)
    q.push([bytes(1400)] * 3, weight=2.0)  # 2856 each: more than the bucket ever holds
    sent = sum(len(q.pop_due(step / 10_000)) for step in range(200))
    assert sent == 3


def _drive(q: PacedQueue) -> list[tuple[float, int]]:
    """A shell that wakes only at the queue's timer: (when, how many) for each wake-up."""
    now, wakes = 0.0, []
    while True:
        out = q.pop_due(now)
        if out:
            wakes.append((now, len(out)))
        t = q.next_timer(now)
        if t is None:
            return wakes
        assert t >= now
        now = t


def test_a_frame_past_the_burst_wakes_the_sender_a_batch_at_a_time_and_ends_when_the_bucket_allows() -> None:
    """40 full datagrams (a 1080p frame): the burst's 16 at once, then batches of WAKE_BATCH instead of a
    wake-up each; the last leaves exactly when the bucket has its bytes, as it would one at a time."""
    size, rate_bytes = 1076 - UDP_OVERHEAD_BYTES, 25_000_000
    q = PacedQueue(TokenBucketPacer(rate_bits_per_s=8 * rate_bytes))
    q.push([bytes(size)] * 40)
    wakes = _drive(q)
    assert sum(n for _, n in wakes) == 40
    assert wakes[0] == (0.0, 16)
    assert [n for _, n in wakes[1:]] == [WAKE_BATCH] * (24 // WAKE_BATCH)
    assert wakes[-1][0] == pytest.approx(24 * 1076 / rate_bytes)


def test_a_short_tail_and_a_narrow_bucket_still_go_without_waiting_for_a_full_batch() -> None:
    """Two datagrams left go when both fit; a bucket that holds one datagram sends each as soon as it has its bytes
    (not when it is full); on a narrow link (a bucket of three) every datagram still leaves, no more at once than
    the bucket holds."""
    size = 1076 - UDP_OVERHEAD_BYTES
    q = PacedQueue(TokenBucketPacer(rate_bits_per_s=8 * 1_000_000, burst_bytes=3 * 1076))
    q.push([bytes(size)] * 5)
    wakes = _drive(q)
    assert [n for _, n in wakes] == [3, 2]
    assert wakes[-1][0] == pytest.approx(2 * 1076 / 1_000_000)
    q = PacedQueue(TokenBucketPacer(rate_bits_per_s=8 * 1_000_000, burst_bytes=1500))
    q.push([bytes(size)] * 3)
    wakes = _drive(q)
    assert [n for _, n in wakes] == [1, 1, 1]
    assert [t for t, _ in wakes] == pytest.approx([0.0, (1076 - 424) / 1e6, (2 * 1076 - 424) / 1e6])
    narrow = TokenBucketPacer(rate_bits_per_s=8 * 1_000_000)
    narrow.set_rate(8 * 100_000)  # the bucket shrinks to three datagrams
    q = PacedQueue(narrow)
    q.push([bytes(size)] * 20)
    wakes = _drive(q)
    assert sum(n for _, n in wakes) == 20
    assert max(n for _, n in wakes[1:]) <= 3


def test_a_packets_data_leaves_before_its_repair_is_computed_and_the_repair_goes_on_the_next_turn() -> None:
    """A 10-block packet with 3 repair blocks fits the burst: its data is handed out with nothing computed, the
    repair on the very next call (the timer says now), sealed like the rest, the same bytes as computed at once."""
    sealed: list[bytes] = []

    def seal(d: bytes) -> bytes:
        sealed.append(d)
        return b"S" + d

    packet = MediaPacket(bytes(range(256)) * 40, pts_us=1_000)
    eager = Packetizer(video_planner=make_planner("reference")).packetize(packet)
    later = Packetizer(video_planner=make_planner("reference")).packetize_video(packet)
    q = PacedQueue(TokenBucketPacer(), seal=seal, seal_overhead=1)
    q.push(later)
    assert q.queued_bytes == sum(len(d) + 1 for d in eager)
    first = q.pop_due(0.0)
    assert first == [b"S" + d for d in eager[:10]]
    assert not any(d.computed for d in later if isinstance(d, LaterDatagram))
    assert q.next_timer(0.0) == 0.0
    assert q.pop_due(0.0) == [b"S" + d for d in eager[10:]]
    assert sealed == eager and len(q) == 0 and q.queued_bytes == 0
    # Alone at the head, repair waits for the bucket like any datagram, and computes then.
    q = PacedQueue(TokenBucketPacer(rate_bits_per_s=8 * 1_000_000, burst_bytes=1500))
    q.push(Packetizer(video_planner=make_planner("reference")).packetize_video(packet))
    wakes = _drive(q)
    assert [n for _, n in wakes] == [1] * 13
    assert wakes[10][0] == pytest.approx(10 * 1076 / 1e6 - 424 / 1e6, abs=1e-9)
