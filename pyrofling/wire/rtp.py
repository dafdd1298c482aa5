"""RTP and RTCP for publishing into an SFU (a Janus streaming mountpoint): the standard formats, not PyroFling's.

* RTP packets (RFC 3550 §5.1): version 2, no padding, extension or CSRC;
* H.264 payloads (RFC 6184): an Annex B access unit split at its start codes, each NAL unit sent whole when it
  fits (§5.6) or as FU-A fragments (§5.8); the access unit's last packet carries the marker bit;
* Opus payloads (RFC 7587): one Opus packet each;
* RTCP (RFC 3550 §6.4.1, RFC 4585 §6.3, RFC 5104 §4.3.1): the sender report the publisher sends so that the SFU
  learns where to send feedback, and the feedback it sends back: picture loss (PLI) and full intra requests (FIR)
  asking for a key frame.

Pure: packing and parsing. A malformed RTCP packet raises :class:`~pyrofling.wire.errors.ProtocolError`.
"""

from __future__ import annotations

import re
import struct

from pyrofling.wire.errors import Buffer, LengthError, ProtocolError, TruncatedError

RTP_HEADER = struct.Struct("!BBHII")  # V/P/X/CC, M/PT, sequence number, timestamp, SSRC
RTCP_HEADER = struct.Struct("!BBH")  # V/P/count, packet type, length in 32-bit words minus one
SENDER_REPORT = struct.Struct("!BBHIIIIII")  # header, SSRC, NTP seconds and fraction, RTP time, packets, octets
VIDEO_CLOCK_HZ = 90_000
#: RTP payload of this size or less: within a 1,500-byte path with IP, UDP and room for an SFU's own headers.
PAYLOAD_BYTES = 1200

RTCP_SR = 200
RTCP_PSFB = 206  # payload-specific feedback
PSFB_PLI = 1
PSFB_FIR = 4
_FU_A = 28
_START_CODE = re.compile(b"\x00\x00\x01")


class RtcpError(ProtocolError):
    """An RTCP packet that does not parse (counted and dropped)."""

    reason = "bad_rtcp"


def rtp_packet(payload_type: int, sequence: int, timestamp: int, ssrc: int, payload: bytes, *, marker: bool) -> bytes:
    return RTP_HEADER.pack(0x80, (0x80 if marker else 0) | payload_type, sequence & 0xFFFF,
                           timestamp & 0xFFFFFFFF, ssrc, ) + payload  # fmt: skip


def nal_units(access_unit: bytes) -> list[bytes]:
    """The NAL units of an Annex B access unit (3- or 4-byte start codes; the zero before a 4-byte one dropped)."""
    starts = [m.end() for m in _START_CODE.finditer(access_unit)]
    units = []
    for i, start in enumerate(starts):
        end = starts[i + 1] - 3 if i + 1 < len(starts) else len(access_unit)
        unit = access_unit[start:end]
        if i + 1 < len(starts):
            unit = unit.rstrip(b"\x00")  # a 4-byte start code's leading zero (and trailing_zero_8bits)
        if unit:
            units.append(unit)
    return units


def h264_profile_level_id(access_unit: bytes) -> str | None:
    """The SDP ``profile-level-id`` of the sequence parameter set in ``access_unit`` (RFC 6184 §8.1), if it has one."""
    for unit in nal_units(access_unit):
        if unit[0] & 0x1F == 7 and len(unit) >= 4:
            return unit[1:4].hex()
    return None


def h264_payloads(access_unit: bytes, payload_bytes: int = PAYLOAD_BYTES) -> list[bytes]:
    """RTP payloads for one access unit, in order: whole NAL units, or FU-A fragments of those too large."""
    if payload_bytes < 3:
        raise ValueError("payload_bytes must leave room for the FU-A headers")
    out = []
    for unit in nal_units(access_unit):
        if len(unit) <= payload_bytes:
            out.append(unit)
            continue
        indicator = (unit[0] & 0xE0) | _FU_A  # F and NRI of the unit, type FU-A
        kind, body, step = unit[0] & 0x1F, unit[1:], payload_bytes - 2
        for offset in range(0, len(body), step):
            start, end = offset == 0, offset + step >= len(body)
            header = (0x80 if start else 0) | (0x40 if end else 0) | kind
            out.append(bytes((indicator, header)) + body[offset : offset + step])
    return out


def h264_reassemble(payloads: list[bytes]) -> list[bytes]:
    """The NAL units that ``payloads`` carry (the receiver's side of :func:`h264_payloads`; for tests and checks)."""
    units, partial = [], bytearray()
    for p in payloads:
        if not p:
            raise TruncatedError("an empty H.264 payload")
        if p[0] & 0x1F != _FU_A:
            units.append(bytes(p))
            continue
        if len(p) < 2:
            raise TruncatedError("an FU-A without its header")
        if p[1] & 0x80:
            partial = bytearray(((p[0] & 0xE0) | (p[1] & 0x1F),))
        partial += p[2:]
        if p[1] & 0x40:
            units.append(bytes(partial))
            partial = bytearray()
    return units


def sender_report(ssrc: int, ntp_s: float, rtp_time: int, packets: int, octets: int) -> bytes:
    """An RTCP sender report with no report blocks."""
    seconds = int(ntp_s)
    fraction = int((ntp_s - seconds) * 2**32) & 0xFFFFFFFF
    return SENDER_REPORT.pack(0x80, RTCP_SR, 6, ssrc, seconds & 0xFFFFFFFF, fraction, rtp_time & 0xFFFFFFFF,
                              packets & 0xFFFFFFFF, octets & 0xFFFFFFFF)  # fmt: skip


def keyframe_requests(data: Buffer) -> int:
    """How many PLI and FIR a (compound) RTCP datagram carries; :class:`RtcpError` if it does not parse."""
    view = memoryview(data)
    if len(view) < RTCP_HEADER.size:
        raise RtcpError("shorter than an RTCP header")
    asked, offset = 0, 0
    while offset < len(view):
        if len(view) - offset < RTCP_HEADER.size:
            raise RtcpError("a truncated RTCP header")
        first, packet_type, words = RTCP_HEADER.unpack_from(view, offset)
        if first >> 6 != 2:
            raise RtcpError(f"RTCP version {first >> 6}, not 2")
        size = (words + 1) * 4
        if offset + size > len(view):
            raise RtcpError(f"an RTCP packet of {size} bytes with {len(view) - offset} left")
        if packet_type == RTCP_PSFB and first & 0x1F in (PSFB_PLI, PSFB_FIR):
            if size < 12:
                raise LengthError("feedback shorter than its two SSRCs")
            asked += 1
        offset += size
    return asked
