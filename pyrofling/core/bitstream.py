"""Just enough H.264 / HEVC bitstream reading to know when a picture is whole again.

Pure.  The viewer stops showing pictures when it loses video (protocol.md §6)
and shows them again from the next IDR, or once an intra-refresh wave that
starts at a recovery point has swept the whole picture.  x264 flags both kinds
of frame as key frames on the wire, so the viewer looks inside.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyrofling.wire import VideoCodec

H264_NAL_SEI = 6
H264_NAL_IDR = 5
HEVC_IRAP_TYPES = range(16, 22)  # BLA, IDR, CRA
SEI_RECOVERY_POINT = 6


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """What a key packet restarts: an IDR (whole now) or a recovery point (whole after ``recovery_frames``)."""

    idr: bool
    recovery_frames: int | None = None


def nal_units(data: bytes) -> list[memoryview]:
    """The NAL units of an Annex B byte stream (start codes removed)."""
    view = memoryview(data)
    starts = []
    i = data.find(b"\x00\x00\x01")
    while i >= 0:
        starts.append(i + 3)
        i = data.find(b"\x00\x00\x01", i + 3)
    out = []
    for n, start in enumerate(starts):
        end = starts[n + 1] - 3 if n + 1 < len(starts) else len(data)
        # A 4-byte start code leaves a zero at the end of the previous unit.
        while end > start and data[end - 1] == 0 and n + 1 < len(starts):
            end -= 1
        out.append(view[start:end])
    return out


def _read_ue(data: bytes, bit: int) -> tuple[int, int]:
    """Exp-Golomb ue(v) starting at ``bit``; returns (value, next bit).  Raises IndexError past the end."""
    zeros = 0
    while not (data[bit >> 3] >> (7 - (bit & 7))) & 1:
        zeros += 1
        bit += 1
        if zeros > 31:
            raise ValueError("exp-Golomb code too long")
    bit += 1
    value = 0
    for _ in range(zeros):
        value = (value << 1) | ((data[bit >> 3] >> (7 - (bit & 7))) & 1)
        bit += 1
    return (1 << zeros) - 1 + value, bit


def _unescape(nal: memoryview) -> bytes:
    return bytes(nal).replace(b"\x00\x00\x03", b"\x00\x00")


def _h264_recovery_frames(sei: memoryview) -> int | None:
    payload = _unescape(sei[1:])
    pos = 0
    try:
        while pos < len(payload) and payload[pos] != 0x80:  # 0x80: rbsp trailing bits
            kind = 0
            while payload[pos] == 0xFF:
                kind += 255
                pos += 1
            kind += payload[pos]
            pos += 1
            size = 0
            while payload[pos] == 0xFF:
                size += 255
                pos += 1
            size += payload[pos]
            pos += 1
            if kind == SEI_RECOVERY_POINT:
                return _read_ue(payload[pos : pos + size], 0)[0]
            pos += size
    except (IndexError, ValueError):
        return None
    return None


def key_info(data: bytes, codec: VideoCodec) -> KeyInfo | None:
    """What the packet restarts, or None when it is neither an IDR nor a recovery point."""
    recovery: int | None = None
    for nal in nal_units(data):
        if not len(nal):
            continue
        if codec == VideoCodec.H265:
            if (nal[0] >> 1) & 0x3F in HEVC_IRAP_TYPES:
                return KeyInfo(idr=True)
            continue
        kind = nal[0] & 0x1F
        if kind == H264_NAL_IDR:
            return KeyInfo(idr=True)
        if kind == H264_NAL_SEI and recovery is None:
            recovery = _h264_recovery_frames(nal)
    return None if recovery is None else KeyInfo(idr=False, recovery_frames=recovery)
