import pytest

from pyrofling.core.host import packetizer as packetizer_module
from pyrofling.core.host.packetizer import (
    MAX_PACKET_BYTES,
    LaterDatagram,
    MediaPacket,
    Packetizer,
    RepairBlocks,
    initial_sequences,
)
from pyrofling.fec import make_planner
from pyrofling.fec.codec import FecPlan, block_count
from pyrofling.wire import StreamType, parse_media_datagram


def test_data_first_then_repair_with_shared_header_fields() -> None:
    p = Packetizer(video_seq=16383, video_planner=make_planner("reference"))
    frame = bytes(range(256)) * 40  # 10240 bytes: 10 blocks, reference F=3
    datagrams = p.packetize(MediaPacket(frame, pts_us=1_000_000, key_frame=True, dts_us=990_000))
    headers = [parse_media_datagram(d)[0] for d in datagrams]
    assert [h.fec for h in headers] == [False] * 10 + [True] * 3
    assert [h.subpacket_seq for h in headers] == [*list(range(10)), 0, 1, 2]
    assert [h.begin for h in headers] == [True] + [False] * 12
    for h in headers:
        assert (h.packet_seq, h.pts_us, h.payload_size, h.key_frame) == (16383, 1_000_000, 10240, True)
        assert (h.num_fec_blocks, h.num_xor_blocks_even, h.num_xor_blocks_odd) == (3, 5, 5)
        assert h.dts_delta_us == 10_000
    assert b"".join(bytes(parse_media_datagram(d)[1]) for d in datagrams[:10]) == frame
    # Sequence wraps at 14 bits.
    assert parse_media_datagram(p.packetize(MediaPacket(b"x", 2))[0])[0].packet_seq == 0


def test_streams_count_separately_and_cookie_seeds_them() -> None:
    assert initial_sequences(1001) == (1001, (~1001) & 0x3FFF)
    p = Packetizer.for_cookie(1001)
    assert p.next_seq(StreamType.VIDEO) == 1001
    p.packetize(MediaPacket(b"a" * 100, 1, StreamType.AUDIO))
    assert p.next_seq(StreamType.VIDEO) == 1001
    assert p.next_seq(StreamType.AUDIO) == ((~1001) & 0x3FFF) + 1


def test_audio_gets_no_fec_unless_asked() -> None:
    p = Packetizer(video_planner=make_planner("reference"))
    assert len(p.packetize(MediaPacket(b"a" * 2000, 1, StreamType.AUDIO))) == 2
    p = Packetizer(audio_planner=make_planner("reference"))
    first = p.packetize(MediaPacket(b"a" * 2000, 1, StreamType.AUDIO))
    assert len(first) == 2 and not any(parse_media_datagram(d)[0].fec for d in first)
    # A chunk's repair block goes out after the next chunk's data, so one burst rarely takes both.
    second = p.packetize(MediaPacket(b"b" * 900, 2, StreamType.AUDIO))
    header, _ = parse_media_datagram(second[-1])
    assert len(second) == 2 and header.fec and header.pts_us == 1 and header.stream == StreamType.AUDIO
    p.audio_repair_later = False
    third = p.packetize(MediaPacket(b"c" * 900, 3, StreamType.AUDIO))
    assert [parse_media_datagram(d)[0].pts_us for d in third] == [3, 2, 3]  # the pending one, then its own


def test_empty_packet_uses_a_sequence_number_and_sends_nothing() -> None:
    p = Packetizer()
    assert p.packetize(MediaPacket(b"", 1)) == []
    assert p.next_seq(StreamType.VIDEO) == 1


def test_oversize_packet_is_refused() -> None:
    with pytest.raises(ValueError, match="exceeds"):
        Packetizer().packetize(MediaPacket(bytes(MAX_PACKET_BYTES + 1), 1))


def test_audio_key_frames_are_refused() -> None:
    with pytest.raises(ValueError, match="ping reply"):
        Packetizer().packetize(MediaPacket(b"a", 1, StreamType.AUDIO, key_frame=True))


def test_key_frames_get_their_own_planner() -> None:
    p = Packetizer(video_planner=make_planner("tuned", ratio=0.25), key_planner=make_planner("tuned", ratio=0.5))
    frame = bytes(40 * 1024)
    repair = [
        sum(parse_media_datagram(d)[0].fec for d in p.packetize(MediaPacket(frame, i, key_frame=k)))
        for i, k in ((0, False), (1, True))
    ]
    assert repair == [11, 21]  # 25 % + 1 for a P-frame, 50 % + 1 for the key frame


def test_viewers_share_one_repair_encode_and_get_identical_blocks() -> None:
    frame = bytes(range(256)) * 80
    packet = MediaPacket(frame, pts_us=123_456)
    cache: dict[FecPlan, RepairBlocks] = {}
    a = Packetizer.for_cookie(1, video_planner=make_planner("tuned")).packetize(packet, repair_cache=cache)
    assert len(cache) == 1
    [(plan, blocks)] = cache.items()
    assert blocks.computed
    # A forged entry proves the second viewer reads the cache rather than computing its own.
    cache[plan] = RepairBlocks(lambda: [b"\xab" * 1024] * plan.repair_blocks)
    b = Packetizer.for_cookie(2, video_planner=make_planner("tuned")).packetize(packet, repair_cache=cache)
    plain = Packetizer.for_cookie(2, video_planner=make_planner("tuned")).packetize(packet)
    assert [bytes(parse_media_datagram(d)[1]) for d in a[20:]] == blocks.blocks()
    assert all(bytes(parse_media_datagram(d)[1]) == b"\xab" * 1024 for d in b[20:])
    assert [parse_media_datagram(d)[0] for d in b] == [parse_media_datagram(d)[0] for d in plain]


@pytest.mark.parametrize("size", [1, 1024, 1025, 10 * 1024 + 7, 35_000, 150_000])
@pytest.mark.parametrize("mds", [False, True])
def test_video_packetized_for_the_pacer_is_the_same_bytes_its_repair_computed_only_when_asked(
    size: int, mds: bool
) -> None:
    frame = bytes((i * 7 + i // 1024) & 0xFF for i in range(size))
    packet = MediaPacket(frame, pts_us=5_000 + size, key_frame=size % 2 == 1)

    def packetizer() -> Packetizer:
        p = Packetizer.for_cookie(9, video_planner=make_planner("tuned"))
        if mds:
            p.use_mds()
        return p

    eager = packetizer().packetize(packet)
    later = packetizer().packetize_video(packet)
    data = block_count(size)
    assert len(later) == len(eager) > data  # every size here gets repair
    assert all(isinstance(d, bytes) for d in later[:data])
    repair = [d for d in later[data:] if isinstance(d, LaterDatagram)]
    assert len(repair) == len(later) - data
    assert [len(d) for d in later] == [len(d) for d in eager]  # the pacer charges them before they exist
    assert not any(d.computed for d in repair)
    assert [d if isinstance(d, bytes) else d.datagram() for d in later] == eager
    assert all(d.computed for d in repair)


def test_a_packets_repair_is_computed_once_for_every_viewer_and_only_when_its_first_datagram_is_due(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    real = packetizer_module.encode_repair

    def counted(frame: bytes, plan: FecPlan, seed: int) -> list[bytes]:
        calls.append(seed)
        return real(frame, plan, seed)

    monkeypatch.setattr(packetizer_module, "encode_repair", counted)
    packet = MediaPacket(bytes(range(256)) * 80, pts_us=77)
    cache: dict[FecPlan, RepairBlocks] = {}
    viewers = [
        Packetizer.for_cookie(cookie, video_planner=make_planner("tuned")).packetize_video(packet, repair_cache=cache)
        for cookie in (1, 2, 3)
    ]
    assert calls == []  # the data is out of the packetizer with no repair computed
    firsts = [next(d for d in v if isinstance(d, LaterDatagram)) for v in viewers]
    payloads = {bytes(parse_media_datagram(d.datagram())[1]) for d in firsts}
    assert len(calls) == 1 and len(payloads) == 1  # three viewers, one encode, the same block


def test_audio_is_not_left_for_later() -> None:
    with pytest.raises(ValueError, match="audio leaves at once"):
        Packetizer().packetize_video(MediaPacket(b"a" * 2000, 1, StreamType.AUDIO))
