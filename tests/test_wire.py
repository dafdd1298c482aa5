"""Wire format: exact bytes, round trips, both type widths, and every truncation."""

import struct

import pytest

from pyrofling.wire import (
    ALL_EXTENSIONS,
    CONTROL_TYPES,
    EXTENSIONS_VERSION,
    MAX_MEDIA_DATAGRAM_BYTES,
    SEALED_HEAD,
    SEALED_MAGIC,
    TYPE_MAGIC,
    Again,
    ArrivalSample,
    AuthChallenge,
    AuthResponse,
    AuthResult,
    BadMagicError,
    CodecParameters,
    ControlFramer,
    Cookie,
    ExtensionFeature,
    Extensions,
    FieldError,
    GamepadState,
    Hello,
    InputState,
    Kick,
    KickFlags,
    LengthError,
    LossReport,
    MediaHeader,
    MessageId,
    Nack,
    Nak,
    Ok,
    PadAssigned,
    PathChallenge,
    PathResponse,
    PhaseOffset,
    Ping,
    PingReply,
    Player,
    Progress,
    ProtocolError,
    RateDecider,
    RateFeedback,
    RequestKeyframe,
    Rumble,
    StreamRate,
    StreamType,
    TruncatedError,
    UnknownControl,
    UnknownMessageError,
    VideoCodec,
    ViewerCodecs,
    ViewerPictureRate,
    parse_control,
    parse_media_datagram,
    parse_udp_control,
    sealed_cookie,
    type_word,
    type_word_wide,
)

SAMPLES = [
    Ok(),
    Nak(),
    Again(),
    Hello(),
    Cookie(0x0123456789ABCDEF),
    Kick(KickFlags.VIDEO | KickFlags.AUDIO | KickFlags.GAMEPAD),
    Progress(1, 2, 3, 4, 5),
    CodecParameters(1, 1, 3, 30, 1, 320, 240, 2, 44100),
    PhaseOffset(-1234),
    GamepadState(65535, 0x7FF, -32767, 32767, 1, -1, 255, 0, -1, 1),
    Ping(255),
    Extensions(EXTENSIONS_VERSION, ExtensionFeature.KEYFRAME_REQUEST),
    RequestKeyframe(),
    AuthChallenge(bytes(range(16)), b"n" * 32, b"m" * 33, b"s" * 32, 6),
    AuthResponse(1, 1, b"i" * 16, b"v" * 32, b"m" * 33, b"name".ljust(32, b"\0"), b"p" * 32),
    AuthResult(2, 60_000, b"h" * 32),
    PathChallenge(2**64 - 1),
    InputState(65535, 0x1F, 3, bytes(range(32)), -(2**31), 2**31 - 1, 5, -5, 65535, 0),
    Player(2**64 - 1),
    PadAssigned(3, 4),
    Rumble(2, 0, 65535, 0, 65535, 65535),
    ViewerCodecs.of([VideoCodec.H264, VideoCodec.H265, VideoCodec.AV1]),
    ViewerPictureRate(71_930),
    PathResponse(12345),
    Nack(0x3FFF, 1, 0, 1000, bytes(range(16))),
    Nack.whole_packet(17, 0),
    LossReport(1, 1000, 50, 3, 4, 1, 12, 7),
    RateFeedback.build(3, 50_000, 61_234, [ArrivalSample(0x3FFF, 12, 2**32 + 7, 2**32 - 1)]),
    StreamRate(4000, 10_000, 3900, RateDecider.YOUR_LINK),
]


def test_magic_is_derived_from_pyr_letters_and_version_mask() -> None:
    magic = ((ord("P") << 26) | (ord("Y") << 20) | (ord("R") << 14)) & 0xFFFFFFFF
    assert magic ^ (0xAA02 << 16) == TYPE_MAGIC


# The exact 64-bit type values a native x86-64 build writes (protocol.md §2.2).
NATIVE_WIDE = {
    MessageId.OK: 0x00000000_EF968000,
    MessageId.NAK: 0x00000000_EF968001,
    MessageId.AGAIN: 0x00000000_EF968002,
    MessageId.HELLO: 0x00000000_EF968003,
    MessageId.COOKIE: 0xFFFFFFFF_EF968204,
    MessageId.KICK: 0xFFFFFFFF_EF968105,
    MessageId.PROGRESS: 0xFFFFFFFF_EF968A06,
    MessageId.CODEC_PARAMETERS: 0xFFFFFFFF_EF968707,
    MessageId.PHASE_OFFSET: 0xFFFFFFFF_EF968108,
    MessageId.GAMEPAD_STATE: 0xFFFFFFFF_EF968409,
    MessageId.PING: 0xFFFFFFFF_EF96808A,
    # pyrofling extensions follow the same rule: sign-extended when a payload follows.
    MessageId.EXTENSIONS: 0xFFFFFFFF_EF968220,
    MessageId.REQUEST_KEYFRAME: 0x00000000_EF968021,
    MessageId.AUTH_CHALLENGE: 0xFFFFFFFF_EF96A562,  # 149-byte payload
    MessageId.AUTH_RESPONSE: 0xFFFFFFFF_EF96A663,  # 153
    MessageId.AUTH_RESULT: 0xFFFFFFFF_EF969A24,  # 104
    MessageId.NACK: 0xFFFFFFFF_EF968625,  # 24
    MessageId.LOSS_REPORT: 0xFFFFFFFF_EF968726,  # 28
    MessageId.RATE_FEEDBACK: 0xFFFFFFFF_EF969C27,  # 112
    MessageId.STREAM_RATE: 0xFFFFFFFF_EF968428,  # 16
    MessageId.PATH_CHALLENGE: 0xFFFFFFFF_EF968229,  # 8
    MessageId.PATH_RESPONSE: 0xFFFFFFFF_EF96822A,  # 8
    MessageId.INPUT_STATE: 0xFFFFFFFF_EF968EAB,  # 58
    MessageId.PLAYER: 0xFFFFFFFF_EF96822C,  # 8
    MessageId.PAD_ASSIGNED: 0xFFFFFFFF_EF96822D,  # 8
    MessageId.RUMBLE: 0xFFFFFFFF_EF9682AE,  # 10
    MessageId.VIEWER_CODECS: 0xFFFFFFFF_EF968130,  # 4
    MessageId.VIEWER_PICTURE_RATE: 0xFFFFFFFF_EF968131,  # 4
}


def test_nack_names_blocks_by_bitmap_and_splits_long_lists() -> None:
    assert Nack(5, 0, 0, 1000, b"\x05" + bytes(15)).blocks() == [1000, 1002]
    nacks = Nack.for_blocks(5, 0, [0, 3, 127, 128, 900])
    assert [n.blocks() for n in nacks] == [[0, 3, 127], [128], [900]]
    assert Nack.whole_packet(9, 1).whole and not nacks[0].whole
    for bad in (Nack(0x4000, 0, 0, 0, bytes(16)), Nack(1, 2, 0, 0, bytes(16))):
        with pytest.raises(FieldError):
            parse_udp_control(bytes(bad))
    with pytest.raises(FieldError):
        parse_udp_control(bytes(LossReport(1, 10, 11, 0, 0, 0, 0, 0)))  # more lost than sent


def test_rate_feedback_keeps_the_newest_samples_and_wraps_times() -> None:
    samples = [ArrivalSample(i, 3, 2**32 + 1000 * i, 2**32 + 1000 * i + 500) for i in range(11)]
    msg = parse_udp_control(bytes(RateFeedback.build(1, 50_000, 9000, samples)))
    assert isinstance(msg, RateFeedback)
    assert [s.packet_seq for s in msg.samples] == list(range(3, 11))  # the newest 8
    assert msg.samples[0].first_arrival_us == 3000 and msg.samples[0].last_arrival_us == 3500
    raw = bytearray(bytes(msg))
    raw[8 + 12] = 9  # count 9 > 8
    with pytest.raises(FieldError):
        parse_udp_control(bytes(raw))
    raw = bytearray(bytes(msg))
    raw[8 + 16 + 1] = 0x40  # first sample's packet_seq beyond 14 bits
    with pytest.raises(FieldError):
        parse_udp_control(bytes(raw))
    with pytest.raises(FieldError):
        parse_control(bytes(StreamRate(1, 1, 1, 9)))
    with pytest.raises(UnknownMessageError):
        parse_udp_control(bytes(StreamRate(1, 1, 1, 0)))  # host -> viewer, TCP only


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_encoding_matches_the_native_bytes(msg: object) -> None:
    data = bytes(msg)  # type: ignore[call-overload]
    cls = type(msg)
    wide = NATIVE_WIDE[cls.ID]  # type: ignore[attr-defined]
    assert struct.unpack_from("<Q", data)[0] == wide
    assert len(data) == 8 + cls.payload_bytes()  # type: ignore[attr-defined]
    assert type_word_wide(cls.ID, cls.payload_bytes()) == wide  # type: ignore[attr-defined]


def test_udp_datagram_sizes_match_the_native_client() -> None:
    assert len(bytes(PhaseOffset(0))) == 12
    assert len(bytes(GamepadState())) == 24
    assert len(bytes(Ping(0))) == 10
    assert len(bytes(Cookie(1))) == 16


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
@pytest.mark.parametrize("width", [4, 8])
def test_round_trip_both_widths(msg: object, width: int) -> None:
    data = msg.encode(type_width=width)  # type: ignore[attr-defined]
    assert parse_control(data) == msg


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_every_truncation_gives_a_protocol_error(msg: object) -> None:
    data = bytes(msg)  # type: ignore[call-overload]
    for cut in range(len(data)):
        piece = data[:cut]
        if cut == 4 + type(msg).payload_bytes():  # type: ignore[attr-defined]
            continue  # that is the valid 4-byte form of the same message
        with pytest.raises(ProtocolError):
            parse_control(piece)
    with pytest.raises(TruncatedError):
        parse_control(data[:3])


def test_specific_errors() -> None:
    with pytest.raises(BadMagicError):
        parse_control(struct.pack("<I", 0x12345678))
    with pytest.raises(UnknownMessageError):
        parse_control(struct.pack("<I", type_word(63, 0)))
    with pytest.raises(LengthError):  # KICK whose type word claims 3 payload bytes
        parse_control(struct.pack("<I", type_word(MessageId.KICK, 3)) + b"abc")
    with pytest.raises(LengthError):  # trailing bytes
        parse_control(bytes(Kick(KickFlags.VIDEO)) + b"x")
    bad_high = struct.pack("<II", type_word(MessageId.KICK, 4), 0x1234) + b"\0\0\0\0"
    with pytest.raises(FieldError):
        parse_control(bad_high)


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_typed_parse_round_trip(msg: object) -> None:
    cls = type(msg)
    assert cls.parse(bytes(msg)) == msg  # type: ignore[attr-defined, call-overload]
    other = Hello() if cls is not Hello else Nak()
    with pytest.raises(UnknownMessageError):
        cls.parse(bytes(other))  # type: ignore[attr-defined]


def test_udp_control_rejects_tcp_only_messages() -> None:
    assert parse_udp_control(bytes(Ping(3))) == Ping(3)
    with pytest.raises(UnknownMessageError):
        parse_udp_control(bytes(Kick(KickFlags.VIDEO)))


def test_unknown_kick_bits_are_kept() -> None:
    raw = struct.pack("<QI", type_word_wide(MessageId.KICK, 4), 0x80000001)
    msg = parse_control(raw)
    assert isinstance(msg, Kick)
    assert int(msg.flags) == 0x80000001


# --- TCP framing --------------------------------------------------------------------------


def test_framer_splits_a_stream_fed_byte_by_byte() -> None:
    stream = b"".join(bytes(m) for m in SAMPLES)
    framer = ControlFramer()
    out = []
    for i in range(len(stream)):
        out += framer.feed(stream[i : i + 1])
    assert out == SAMPLES
    assert framer.type_width == 8


def test_framer_learns_a_32_bit_peer() -> None:
    msgs = [Hello(), Kick(KickFlags.VIDEO), Progress(9, 0, 0, 0, 1), Nak()]
    stream = b"".join(m.encode(type_width=4) for m in msgs)
    framer = ControlFramer()
    out = []
    for i in range(0, len(stream), 3):
        out += framer.feed(stream[i : i + 3])
    assert out == msgs
    assert framer.type_width == 4


def test_framer_delivers_hello_before_its_width_is_known() -> None:
    # A 4-byte HELLO must be answered even though nothing follows it yet.
    framer = ControlFramer()
    assert framer.feed(Hello().encode(type_width=4)) == [Hello()]
    assert framer.type_width is None


def test_framer_rejects_garbage_and_overflow() -> None:
    with pytest.raises(BadMagicError):
        ControlFramer().feed(b"\x00" * 8)
    framer = ControlFramer(max_buffer_bytes=16)
    with pytest.raises(LengthError):
        framer.feed(struct.pack("<Q", type_word_wide(MessageId.PROGRESS, 40)) + b"\0" * 20)


def test_framer_limit_bounds_the_partial_message_not_one_reads_worth_of_whole_ones() -> None:
    """A busy peer's read can hold many whole messages and the start of the next: not an overflow."""
    framer = ControlFramer(max_buffer_bytes=64)
    stream = bytes(Hello()) + bytes(Nak()) * 200 + bytes(Kick(KickFlags.VIDEO))
    out = framer.feed(stream[:-3])  # 1600+ bytes at once, the KICK cut short
    assert len(out) == 201 and isinstance(out[-1], Nak)
    assert framer.feed(stream[-3:]) == [Kick(KickFlags.VIDEO)]


# --- media datagrams -----------------------------------------------------------------------


def test_media_header_layout() -> None:
    h = MediaHeader(
        pts_us=0x1122334455667788,
        dts_delta_us=7,
        payload_size=5000,
        num_fec_blocks=3,
        num_xor_blocks_even=2,
        num_xor_blocks_odd=3,
        packet_seq=0x3FFF,
        subpacket_seq=0x2AAA,
        key_frame=True,
        stream=StreamType.AUDIO,
        fec=True,
        begin=False,
    )
    raw = bytes(h)
    assert len(raw) == 24
    assert raw[:8] == struct.pack("<Q", 0x1122334455667788)
    assert struct.unpack_from("<IIHBB", raw, 8) == (7, 5000, 3, 2, 3)
    flags = struct.unpack_from("<I", raw, 20)[0]
    assert flags & 0xF == 0b0111  # KEY | AUDIO | FEC, no BEGIN
    assert (flags >> 4) & 0x3FFF == 0x3FFF
    assert (flags >> 18) & 0x3FFF == 0x2AAA
    assert MediaHeader.parse(raw) == h


def test_media_datagram_limits() -> None:
    h = bytes(MediaHeader(0, 0, 10, 0, 0, 0, 1, 0, begin=True))
    header, body = parse_media_datagram(h + b"x" * 10)
    assert header.begin and bytes(body) == b"x" * 10
    with pytest.raises(TruncatedError):
        parse_media_datagram(h[:23])
    with pytest.raises(LengthError):
        parse_media_datagram(b"\0" * (MAX_MEDIA_DATAGRAM_BYTES + 1))


def test_ping_reply_is_32_bytes_with_key_and_audio() -> None:
    raw = bytes(PingReply(seq=300, server_time_us=123456789))
    assert len(raw) == 32
    header, _ = parse_media_datagram(raw)
    assert header.is_ping_reply and header.packet_seq == 300
    assert PingReply.parse(raw) == PingReply(300, 123456789)
    with pytest.raises(LengthError):
        PingReply.parse(raw[:-1])


def test_all_types_are_registered() -> None:
    assert set(CONTROL_TYPES) == set(MessageId)


def test_extensions_drop_unknown_feature_bits() -> None:
    msg = parse_control(bytes(Extensions(1, 0xFFFF_FFFF)))
    assert isinstance(msg, Extensions)
    assert msg.features == 0xFFFF_FFFF  # kept on the wire object
    assert msg.feature_flags == ALL_EXTENSIONS  # but only known ones are usable
    assert ALL_EXTENSIONS == 0x1FFF  # the thirteen features of protocol.md §7.2


def test_viewer_codecs_name_codecs_by_their_ids_and_ignore_bits_this_build_does_not_know() -> None:
    msg = parse_control(bytes(ViewerCodecs.of([VideoCodec.H264, VideoCodec.AV1])))
    assert isinstance(msg, ViewerCodecs) and msg.codec_bits == 0b1010
    assert msg.codecs() == {VideoCodec.H264, VideoCodec.AV1}
    assert ViewerCodecs(0xFFFF_FFF1).codecs() == {VideoCodec.PYROWAVE}  # bit 0 (none) and bits past 4: nothing


def test_sealed_viewer_datagrams_are_not_type_words() -> None:
    """A native host must drop a sealed datagram as bad magic, and ours must find its cookie."""
    data = SEALED_HEAD.pack(SEALED_MAGIC, 0xFEED) + b"x" * 40
    assert sealed_cookie(data) == 0xFEED
    with pytest.raises(ProtocolError):
        parse_control(data)
    assert sealed_cookie(bytes(Cookie(0xFEED))) is None and sealed_cookie(SEALED_MAGIC) is None


@pytest.mark.parametrize("width", [4, 8])
def test_framer_hands_over_unknown_ids_so_the_host_can_nak_them(width: int) -> None:
    # A newer peer's message (valid magic, id this build does not know) must not end the stream.
    word = type_word(60, 3)
    unknown = (struct.pack("<Q", 0xFFFFFFFF << 32 | word) if width == 8 else struct.pack("<I", word)) + b"abc"
    stream = Kick(KickFlags.VIDEO).encode(type_width=width) + unknown + Hello().encode(type_width=width)
    framer = ControlFramer()
    assert framer.feed(stream) == [Kick(KickFlags.VIDEO), UnknownControl(60, b"abc"), Hello()]
