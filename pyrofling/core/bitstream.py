"""Just enough H.264 / HEVC / AV1 bitstream reading to know when a picture is whole again.

Pure.  The viewer stops showing pictures when it loses video (protocol.md §6)
and shows them again from the next IDR, or once an intra-refresh wave that
starts at a recovery point has swept the whole picture.  x264 flags both kinds
of frame as key frames on the wire, so the viewer looks inside.  An AV1 temporal
unit that carries a sequence header starts a coded video sequence: a key frame
(SVT-AV1 repeats the header with each one, and has no intra refresh).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyrofling.wire import VideoCodec

H264_NAL_SEI = 6
H264_NAL_IDR = 5
HEVC_IRAP_TYPES = range(16, 22)  # BLA, IDR, CRA
SEI_RECOVERY_POINT = 6
AV1_OBU_SEQUENCE_HEADER = 1


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """What a key packet restarts: an IDR (whole now) or a recovery point (whole after ``recovery_frames``)."""

    idr: bool
    recovery_frames: int | None = None


@dataclass(slots=True)
class KeyGate:
    """Whether pictures decode whole: closed until a key frame, and again after any loss.

    Both ends keep one.  The viewer shows only whole pictures (an IDR makes the picture whole at
    once, a recovery point once its refresh wave has passed); the host's recording and broadcast
    start and resume at a key frame, since a muxed stream with a hole stays broken up to the next
    one.  Feed it every video packet in decode order and call :meth:`lost` on any loss.
    """

    whole: bool = False
    #: Frames still to come before a recovery-point refresh has covered the picture.
    frames_to_recovery: int | None = None
    key_frames: int = 0
    idrs: int = 0
    #: Packets offered while the gate was closed.
    skipped: int = 0
    #: Closed for good: no key frame opens it again (see :meth:`stop`).
    stopped: bool = False

    def packet(self, key: KeyInfo | None) -> bool:
        """One packet in decode order (``key``: what it restarts, None for an ordinary frame); whole?"""
        if self.stopped:
            self.skipped += 1
            return False
        if key is not None:
            self.key_frames += 1
            if key.idr:
                self.idrs += 1
                self.whole, self.frames_to_recovery = True, None
            elif not self.whole and self.frames_to_recovery is None:
                self.frames_to_recovery = key.recovery_frames or 0
        if not self.whole and self.frames_to_recovery is not None:
            if self.frames_to_recovery <= 0:
                self.whole, self.frames_to_recovery = True, None
            else:
                self.frames_to_recovery -= 1
        if not self.whole:
            self.skipped += 1
        return self.whole

    def lost(self) -> None:
        """Packets went missing: nothing is whole until the next key frame."""
        self.whole, self.frames_to_recovery = False, None

    def stop(self) -> None:
        """Close for good (a recording that failed a write must not be reopened over what it holds)."""
        self.lost()
        self.stopped = True


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


def av1_obu_types(data: bytes) -> list[int]:
    """The OBU types of an AV1 temporal unit (low-overhead format: each OBU sized), as far as it parses."""
    types: list[int] = []
    pos = 0
    while pos < len(data):
        header = data[pos]
        if header & 0x80:  # the forbidden bit: not AV1
            break
        kind, extension, sized = (header >> 3) & 0x0F, bool(header & 0x04), bool(header & 0x02)
        pos += 2 if extension else 1
        if not sized:  # the last OBU runs to the end
            types.append(kind)
            break
        size, shift = 0, 0
        while pos < len(data) and shift < 56:  # leb128, at most 8 bytes
            byte = data[pos]
            pos += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        else:
            break  # cut short
        if pos + size > len(data):
            break
        types.append(kind)
        pos += size
    return types


def key_info(data: bytes, codec: VideoCodec) -> KeyInfo | None:
    """What the packet restarts, or None when it is neither an IDR nor a recovery point."""
    if codec == VideoCodec.AV1:
        return KeyInfo(idr=True) if AV1_OBU_SEQUENCE_HEADER in av1_obu_types(data) else None
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
