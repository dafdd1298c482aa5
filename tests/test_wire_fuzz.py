"""Random and mutated bytes at every parser: only ProtocolError may escape."""

import contextlib
import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from pyrofling.wire import (
    ArrivalSample,
    CodecParameters,
    ControlFramer,
    Cookie,
    GamepadState,
    Hello,
    Kick,
    KickFlags,
    LossReport,
    MediaHeader,
    Nack,
    PhaseOffset,
    Ping,
    PingReply,
    Progress,
    ProtocolError,
    RateFeedback,
    parse_control,
    parse_media_datagram,
    parse_udp_control,
)

VALID = [
    bytes(m)
    for m in (
        Hello(),
        Cookie(1001),
        Kick(KickFlags.VIDEO | KickFlags.AUDIO),
        Progress(10, 1, 2, 0, 1),
        CodecParameters(1, 1, 3, 60, 1, 1280, 720, 2, 48000),
        PhaseOffset(500),
        GamepadState(1, 3, 100, -100, 0, 0, 10, 20, 0, -1),
        Ping(7),
        Nack(3, 0, 0, 2, b"\x03" + bytes(15)),
        LossReport(9, 400, 12, 1, 2, 0, 3, 5),
        RateFeedback.build(2, 50_000, 40_000, [ArrivalSample(5, 9, 100, 900), ArrivalSample(6, 9, 17_000, 17_800)]),
    )
] + [bytes(PingReply(5, 99)), bytes(MediaHeader(16667, 0, 3000, 1, 3, 3, 42, 1)) + b"\x55" * 1024]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(4)
        if op == 0 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 1 and b:
            del b[rng.randrange(len(b)) :]
        elif op == 2:
            b += rng.randbytes(rng.randint(1, 16))
        elif b:
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def _only_protocol_errors(fn, data: bytes) -> bool:  # type: ignore[no-untyped-def]
    """Parse; True if it parsed, False if it was refused with a ProtocolError (anything else escapes)."""
    try:
        fn(data)
    except ProtocolError:
        return False
    return True


def test_100k_random_and_mutated_inputs_to_every_parser() -> None:
    rng = random.Random(2024)
    parsers = (parse_control, parse_udp_control, parse_media_datagram, PingReply.parse)
    outcomes: Counter[tuple[str, bool]] = Counter()
    for i in range(100_000):
        data = _mutate(rng, rng.choice(VALID)) if i % 2 else rng.randbytes(rng.randint(0, 64))
        for fn in parsers:
            outcomes[fn.__qualname__, _only_protocol_errors(fn, data)] += 1
    # The inputs reached both sides of every parser: mutations it still accepts, and refusals (the only
    # exception allowed out being ProtocolError, any other would have failed the test above).
    for fn in parsers:
        accepted, refused = outcomes[fn.__qualname__, True], outcomes[fn.__qualname__, False]
        assert accepted > 100 and refused > 10_000, (fn.__qualname__, accepted, refused)


def test_framer_survives_random_streams() -> None:
    rng = random.Random(7)
    for _ in range(3_000):
        framer = ControlFramer(max_buffer_bytes=4096)
        stream = b"".join(_mutate(rng, rng.choice(VALID[:8])) for _ in range(rng.randint(1, 6)))
        try:
            for i in range(0, len(stream), rng.randint(1, 9)):
                framer.feed(stream[i : i + 9])
        except ProtocolError:
            pass


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_hypothesis_binary(data: bytes) -> None:
    for fn in (parse_control, parse_udp_control, parse_media_datagram):
        _only_protocol_errors(fn, data)
    with contextlib.suppress(ProtocolError):
        ControlFramer().feed(data)


@given(
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**16 - 1),
    st.integers(0, 255),
    st.integers(0, 255),
    st.integers(0, 2**14 - 1),
    st.integers(0, 2**14 - 1),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_media_header_round_trip(pts, dts, size, nfec, even, odd, seq, sub, key, audio, fec, begin) -> None:  # type: ignore[no-untyped-def]
    from pyrofling.wire import StreamType

    h = MediaHeader(pts, dts, size, nfec, even, odd, seq, sub, key, StreamType(int(audio)), fec, begin)
    assert MediaHeader.parse(bytes(h)) == h
