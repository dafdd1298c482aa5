"""Reassembly with a fake clock: order, loss, FEC, reordering, deadlines, limits."""

import random
from typing import Any

from pyrofling.core.host.packetizer import MediaPacket, Packetizer
from pyrofling.core.viewer.reassembler import (
    PacketReady,
    PacketsLost,
    PingReplyReceived,
    Reassembler,
    ReassemblerConfig,
    ReassemblyEvent,
)
from pyrofling.fec import make_planner
from pyrofling.wire import MediaHeader, PingReply, Progress, StreamType


def _frames(n: int, rng: random.Random, size: tuple[int, int] = (1, 20000)) -> list[bytes]:
    return [rng.randbytes(rng.randint(*size)) for _ in range(n)]


def _packetize(frames: list[bytes], planner: str = "tuned", stream: StreamType = StreamType.VIDEO) -> list[list[bytes]]:
    p = Packetizer(video_seq=16380, audio_seq=5, video_planner=make_planner(planner))
    video = stream == StreamType.VIDEO
    return [
        p.packetize(MediaPacket(f, 1000 + i * 16667, stream, key_frame=video and i == 0)) for i, f in enumerate(frames)
    ]


def _ready(events: list[ReassemblyEvent]) -> list[PacketReady]:
    return [e for e in events if isinstance(e, PacketReady)]


def test_in_order_delivery_without_loss_across_the_sequence_wrap() -> None:
    rng = random.Random(1)
    frames = _frames(20, rng)
    r = Reassembler()
    out = []
    for i, datagrams in enumerate(_packetize(frames)):
        for d in datagrams:
            out += _ready(r.receive(d, i * 0.016))
    assert [e.data for e in out] == frames
    assert [e.seq for e in out][:5] == [16380, 16381, 16382, 16383, 0]
    assert r.counters.to_message() == Progress(20, 0, 0, 0, 1)
    assert set(r.discarded) <= {"unneeded_repair"}  # repair blocks after completion, nothing else
    assert r.buffered_bytes == 0


def test_fec_recovers_a_lost_block_and_counts_it() -> None:
    frames = [bytes(range(256)) * 30]
    datagrams = _packetize(frames, "reference")[0]
    r = Reassembler()
    events = []
    for i, d in enumerate(datagrams):
        if i != 3:
            events += r.receive(d, 0.0)
    assert [e.data for e in _ready(events)] == frames
    assert r.counters.fec_recovered == 1


def test_reordering_across_several_packets_is_tolerated() -> None:
    rng = random.Random(2)
    frames = _frames(12, rng)
    packets = _packetize(frames, "none")
    # Packet 1's datagrams arrive after packets 2..5 are complete: the reference would drop it.
    order = packets[0] + [d for p in packets[2:6] for d in p] + packets[1] + [d for p in packets[6:] for d in p]
    r = Reassembler()
    out = []
    for d in order:
        out += _ready(r.receive(d, 0.0))
    assert [e.data for e in out] == frames
    assert r.counters.dropped_video == 0


def test_datagrams_shuffled_within_a_window_all_arrive() -> None:
    rng = random.Random(3)
    frames = _frames(30, rng, (1, 6000))
    flat = [d for p in _packetize(frames, "none") for d in p]
    first = len(_packetize(frames[:1], "none")[0])  # the first packet arrives intact, then chaos
    for i in range(first, len(flat), 8):  # shuffle within windows of 8 datagrams
        window = flat[i : i + 8]
        rng.shuffle(window)
        flat[i : i + 8] = window
    r = Reassembler()
    out = []
    for d in flat:
        out += _ready(r.receive(d, 0.0))
    assert [e.data for e in out] == frames


def test_a_lost_packet_releases_the_next_after_the_reorder_timeout() -> None:
    rng = random.Random(4)
    frames = _frames(3, rng, (3000, 3000))
    packets = _packetize(frames, "none")
    cfg = ReassemblerConfig(reorder_timeout_s=0.004)
    r = Reassembler(cfg)
    assert r.receive(packets[0][0], 0.0) == []  # packet 0 is incomplete forever
    events = []
    for d in packets[1]:
        events += r.receive(d, 0.001)
    assert _ready(events) == []  # held: packet 0 may still complete
    assert r.next_timer() == 0.001 + 0.004
    assert r.handle_timer(0.0045) == []
    events = r.handle_timer(0.005)
    assert [e.data for e in _ready(events)] == [frames[1]]
    # Packet 0 was given up: lost now, not only once something after it is delivered.
    assert [(e.count, e.before_seq) for e in events if isinstance(e, PacketsLost)] == [(1, packets_seq(packets, 1))]
    assert r.counters.dropped_video == 1
    events = []
    for d in packets[2]:
        events += r.receive(d, 0.02)
    assert [e.data for e in _ready(events)] == [frames[2]]
    # The late datagrams of packet 0 are stale now.
    assert r.receive(packets[0][1], 0.03) == []
    assert r.discarded["late"] >= 1


def packets_seq(packets: list[list[bytes]], index: int) -> int:
    return MediaHeader.parse(packets[index][0]).packet_seq


def test_a_stream_where_nothing_completes_still_counts_its_loss() -> None:
    """A link narrower than the stream: every packet arrives in part, none completes, none is delivered.
    The viewer must still know it is losing everything (and ask for help), not report 0 lost."""
    rng = random.Random(6)
    frames = _frames(30, rng, (6000, 6000))
    packets = _packetize(frames, "none")
    r = Reassembler(ReassemblerConfig(deadline_s=0.1))
    lost = 0
    for i, datagrams in enumerate(packets):
        now = i / 60
        for d in datagrams[:2]:  # the rest never fits through
            lost += sum(e.count for e in r.receive(d, now) if isinstance(e, PacketsLost))
        lost += sum(e.count for e in r.handle_timer(now) if isinstance(e, PacketsLost))
    lost += sum(e.count for e in r.handle_timer(10.0) if isinstance(e, PacketsLost))
    assert r.counters.received == 0
    assert lost == r.counters.dropped_video == 30


def test_loss_is_counted_when_a_later_packet_is_delivered() -> None:
    rng = random.Random(5)
    frames = _frames(4, rng, (100, 100))
    packets = _packetize(frames, "none")
    r = Reassembler()
    events = []
    for i in (0, 3):
        for d in packets[i]:
            events += r.receive(d, float(i))
    assert len(_ready(events)) == 1  # packet 3 waits briefly for 1 and 2
    events += r.handle_timer(3.0 + r.config.reorder_timeout_s)
    lost = [e for e in events if isinstance(e, PacketsLost)]
    assert lost == [PacketsLost(StreamType.VIDEO, 2, (16380 + 3) & 0x3FFF)]
    assert r.counters.dropped_video == 2 and r.counters.received == 2


def test_deadline_gives_up_an_incomplete_packet() -> None:
    r = Reassembler(ReassemblerConfig(deadline_s=0.1))
    packets = _packetize([bytes(5000)], "none")
    r.receive(packets[0][0], 1.0)
    assert r.in_flight(StreamType.VIDEO) == 1
    assert r.next_timer() == 1.1
    r.handle_timer(1.1)
    assert r.in_flight(StreamType.VIDEO) == 0
    assert r.discarded["gave_up_packet"] == 1
    assert r.next_timer() is None


def test_audio_and_video_are_independent() -> None:
    r = Reassembler()
    video = _packetize([b"v" * 3000], "none")[0]
    audio = _packetize([b"a" * 1500], "none", StreamType.AUDIO)[0]
    events = r.receive(video[0], 0.0)
    for d in audio:
        events += r.receive(d, 0.0)
    assert [(e.stream, e.data) for e in _ready(events)] == [(StreamType.AUDIO, b"a" * 1500)]


def test_ping_reply_event() -> None:
    r = Reassembler()
    assert r.receive(bytes(PingReply(9, 123)), 5.0) == [PingReplyReceived(9, 123, 5.0)]
    assert r.receive(bytes(PingReply(9, 123))[:-2], 5.0) == []
    assert r.discarded["bad_length"] == 1


def _header(**kw: Any) -> bytes:
    fields: dict[str, Any] = dict(
        pts_us=1,
        dts_delta_us=0,
        payload_size=2048,
        num_fec_blocks=0,
        num_xor_blocks_even=0,
        num_xor_blocks_odd=0,
        packet_seq=1,
        subpacket_seq=0,
        begin=True,
    )
    fields.update(kw)
    return bytes(MediaHeader(**fields))


def test_malformed_datagrams_are_counted_by_reason() -> None:
    r = Reassembler(ReassemblerConfig(max_packet_bytes=1 << 20))
    cases = {
        "short_datagram": b"\0" * 10,
        "long_datagram": _header() + b"\0" * 1025,
        "oversize_packet": _header(payload_size=(1 << 20) + 1) + b"\0" * 1024,
        "empty_packet": _header(payload_size=0),
        "bad_fec_plan": _header(num_fec_blocks=2, num_xor_blocks_even=9, num_xor_blocks_odd=1) + b"\0" * 1024,
        "bad_block_index": _header(subpacket_seq=5, begin=False) + b"\0" * 1024,
        "bad_begin": _header(subpacket_seq=1, begin=True, packet_seq=2) + b"\0" * 1024,
        "bad_length": _header(packet_seq=3) + b"\0" * 1000,
    }
    for reason, datagram in cases.items():
        assert r.receive(datagram, 0.0) == []
        assert r.discarded[reason] >= 1, reason
    # A datagram disagreeing with its packet's first datagram is dropped, the packet survives.
    r2 = Reassembler()
    r2.receive(_header(packet_seq=7) + b"a" * 1024, 0.0)
    r2.receive(_header(packet_seq=7, subpacket_seq=1, begin=False, payload_size=4096) + b"b" * 1024, 0.0)
    assert r2.discarded["inconsistent_header"] == 1
    done = r2.receive(_header(packet_seq=7, subpacket_seq=1, begin=False) + b"b" * 1024, 0.0)
    assert [e.data for e in _ready(done)] == [b"a" * 1024 + b"b" * 1024]


def test_memory_is_bounded_by_in_flight_and_byte_caps() -> None:
    cfg = ReassemblerConfig(max_in_flight=4, max_buffered_bytes=64 * 1024, max_packet_bytes=48 * 1024)
    r = Reassembler(cfg)
    for seq in range(50):  # first datagram only: every packet stays incomplete
        r.receive(_header(packet_seq=seq, payload_size=40 * 1024) + b"\0" * 1024, seq * 0.001)
        assert r.in_flight(StreamType.VIDEO) <= 4
        assert r.buffered_bytes <= 64 * 1024
    assert r.discarded["gave_up_packet"] > 40


def test_a_forged_sequence_number_far_ahead_stalls_the_stream_only_until_it_resyncs() -> None:
    """One complete packet with a sequence number 5000 ahead moves the floor past the real stream; the
    real datagrams that follow are stale until, half a second and 32 of them later, the stream re-anchors."""
    rng = random.Random(3)
    frames = _frames(80, rng, (200, 900))  # one datagram each
    packets = _packetize(frames)
    real_seq = MediaHeader.parse(packets[10][0]).packet_seq
    forged = Packetizer(video_seq=(real_seq + 5000) & 0x3FFF, audio_seq=0, video_planner=make_planner("none"))
    r = Reassembler()
    shown: list[tuple[float, bytes]] = []
    for i, datagrams in enumerate(packets):
        now = i / 60
        if i == 10:
            for d in forged.packetize(MediaPacket(b"forged", 0, StreamType.VIDEO, key_frame=False)):
                shown += [(now, e.data) for e in _ready(r.receive(d, now))]
        for d in datagrams:
            shown += [(now, e.data) for e in _ready(r.receive(d, now))]
    forged_at = next(t for t, data in shown if data == b"forged")  # once its reorder wait is over
    delivered_real = [data for _, data in shown if data != b"forged"]
    assert r.discarded["stream_resync"] == 1
    # Stale for ~0.5 s (30 frames at 60 per second, ≥ 32 datagrams), then every frame again.
    first_after = next(t for t, data in shown if data != b"forged" and t > forged_at)
    assert 0.5 <= first_after - forged_at <= 0.75
    assert delivered_real[-1] == frames[-1] and len(delivered_real) >= 80 - 45
    # (The jump itself is counted as ~5000 packets lost: the forged packet looked like the newest.)


def test_a_healthy_stream_with_late_duplicates_never_resyncs() -> None:
    rng = random.Random(4)
    packets = _packetize(_frames(200, rng, (200, 3000)))
    r = Reassembler()
    out = []
    for i, datagrams in enumerate(packets):
        for d in datagrams + datagrams[:1]:  # every packet's first datagram again, stale
            out += _ready(r.receive(d, i / 60))
    assert len(out) == 200 and "stream_resync" not in r.discarded


def test_once_the_picture_size_is_known_a_forged_huge_packet_size_reserves_nothing() -> None:
    big = _packetize([bytes(300_000)], "none")[0]  # a real 300 kB packet: bigger than two 320x240 frames
    r = Reassembler()
    r.receive(big[0], 0.0)
    assert r.buffered_bytes >= 300_000  # before the size is known, the header's word is taken
    r = Reassembler()
    r.expect_picture(320, 240)
    assert r.receive(big[0], 0.0) == [] and r.buffered_bytes == 0
    assert r.discarded["oversize_packet"] == 1
    r.expect_picture(1920, 1080)  # a 300 kB key frame of a 1080p stream is fine
    r.receive(big[0], 0.0)
    assert r.buffered_bytes >= 300_000
