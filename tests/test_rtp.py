"""RTP/RTCP for the spectators' SFU (pyrofling.wire.rtp): H.264 payloads, sender reports, key-frame requests."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyrofling.wire.errors import ProtocolError
from pyrofling.wire.rtp import (
    RTP_HEADER,
    h264_payloads,
    h264_profile_level_id,
    h264_reassemble,
    keyframe_requests,
    nal_units,
    rtp_packet,
    sender_report,
)

SPS, PPS = b"\x67\x42\xc0\x1f\xda\x01", b"\x68\xce\x3c\x80"


def idr(size: int) -> bytes:
    return b"\x65" + bytes((i * 7 + 1) % 251 + 1 for i in range(size - 1))  # no zero bytes: no false start code


def pli(sender: int = 1, media: int = 2) -> bytes:
    return struct.pack("!BBHII", 0x81, 206, 2, sender, media)


def test_an_access_unit_splits_at_its_start_codes_and_large_units_go_as_fu_a_that_reassemble() -> None:
    au = b"\x00\x00\x00\x01" + SPS + b"\x00\x00\x00\x01" + PPS + b"\x00\x00\x01" + idr(3000)
    assert nal_units(au) == [SPS, PPS, idr(3000)]
    payloads = h264_payloads(au, payload_bytes=1200)
    assert payloads[:2] == [SPS, PPS] and all(len(p) <= 1200 for p in payloads)
    fragments = payloads[2:]
    assert len(fragments) == 3  # 2,999 bytes after the NAL header, 1,198 a fragment
    assert [p[0] for p in fragments] == [0x60 | 28] * 3  # the IDR's NRI (3), type FU-A
    assert [p[1] >> 6 for p in fragments] == [0b10, 0b00, 0b01]  # start, middle, end
    assert all(p[1] & 0x1F == 5 for p in fragments)  # the unit's own type (IDR) in each FU header
    assert h264_reassemble(payloads) == [SPS, PPS, idr(3000)]
    assert h264_profile_level_id(au) == "42c01f"  # what the spectators' SDP says the stream is
    assert h264_profile_level_id(b"\x00\x00\x01" + idr(100)) is None  # a picture without its parameter sets


@given(st.lists(st.integers(min_value=1, max_value=5000), min_size=1, max_size=6), st.integers(3, 1500))
def test_any_access_unit_comes_back_whole_from_its_payloads(sizes: list[int], payload_bytes: int) -> None:
    units = [bytes((0x41,)) + idr(n)[1:] if n > 1 else b"\x41" for n in sizes]
    au = b"".join(b"\x00\x00\x00\x01" + u for u in units)
    payloads = h264_payloads(au, payload_bytes)
    assert all(len(p) <= payload_bytes for p in payloads)
    assert h264_reassemble(payloads) == units


def test_an_rtp_packet_has_its_fields_where_rfc_3550_puts_them() -> None:
    packet = rtp_packet(96, 70000, 2**32 + 5, 0xDEADBEEF, b"xyz", marker=True)
    first, second, seq, ts, ssrc = RTP_HEADER.unpack_from(packet)
    assert (first, second, seq, ts, ssrc) == (0x80, 0x80 | 96, 70000 & 0xFFFF, 5, 0xDEADBEEF)
    assert packet[RTP_HEADER.size :] == b"xyz"
    assert RTP_HEADER.unpack_from(rtp_packet(111, 1, 2, 3, b"", marker=False))[1] == 111


def test_key_frame_requests_are_counted_in_compound_rtcp_and_other_feedback_is_not() -> None:
    report = sender_report(7, 3913056000.25, 90000, 10, 12000)
    assert len(report) == 28 and keyframe_requests(report) == 0
    fir = struct.pack("!BBHII", 0x84, 206, 4, 1, 0) + struct.pack("!IBBH", 2, 1, 0, 0)
    remb = struct.pack("!BBHII", 0x8F, 206, 2, 1, 0)  # application-layer feedback (REMB): not a request
    nack = struct.pack("!BBHII", 0x81, 205, 2, 1, 2)  # a transport-layer NACK: not a request either
    assert keyframe_requests(pli()) == 1
    assert keyframe_requests(report + pli() + fir + remb + nack) == 2


@pytest.mark.parametrize(
    "data",
    [b"", b"\x81\xce", pli()[:11], b"\x41" + pli()[1:], struct.pack("!BBH", 0x81, 206, 0), pli() + b"\x80"],
    ids=["empty", "short-header", "truncated", "version-1", "feedback-without-ssrcs", "trailing-byte"],
)
def test_malformed_rtcp_is_refused_by_name(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        keyframe_requests(data)


@given(st.binary(max_size=200))
def test_no_datagram_breaks_the_rtcp_parser(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        assert keyframe_requests(data) >= 0
