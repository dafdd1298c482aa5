"""The browsers' stream (``host --web``), byte for byte: protocol.md §9.

Its binary messages: host → browser, a picture (``b"S"`` and its number, then ``b"V"``, a flags byte, capture and
pts µs, the Annex-B bytes), a unit of sound (``b"A"``, the same header, the codec's packet) and, over
WebTransport, sound in groups (``b"G"``, then each unit's length and ``b"A"`` message; a picture's bytes are an
H.264 access unit in Annex B or an AV1 temporal unit of sized OBUs, as the hello or a later ``codec`` message
says); browser → host, its pad
(``b"P"`` + a GAMEPAD_STATE payload), keys and mouse (``b"I"`` + an INPUT_STATE payload) and its arrivals report
(``b"R"`` + a RATE_FEEDBACK payload). Pure: packing and parsing; a parser raises nothing but
:class:`~pyrofling.wire.errors.ProtocolError`. The JSON text messages are in §9 too.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pyrofling.wire.control import GamepadState, InputState, RateFeedback, VideoCodec
from pyrofling.wire.errors import Buffer, LengthError, TruncatedError, UnknownMessageError

#: The video codecs by the names the page and the host use for them (the hello's ``codec``, the auth's ``codecs``).
PAGE_CODEC_NAMES = {VideoCodec.H264: "h264", VideoCodec.H265: "hevc", VideoCodec.AV1: "av1"}
PAGE_CODECS = {name: codec for codec, name in PAGE_CODEC_NAMES.items()}

#: A picture's or a sound unit's header: tag, flags, capture µs, pts µs (little-endian).
MEDIA_HEADER = struct.Struct("<cBQQ")
VIDEO_TAG, AUDIO_TAG, SEQ_TAG, GROUP_TAG = b"V", b"A", b"S", b"G"
FLAG_IDR = 1
#: Before a picture's message: b"S" and the picture's number for that browser (what its arrival reports name;
#: WebTransport streams may arrive out of order, and the page decodes them in this order).
STREAM_SEQ = struct.Struct("<cI")
#: In a group, before each unit's ``b"A"`` message: its length (a raw PCM unit may be 64 KiB).
SOUND_UNIT_LENGTH = struct.Struct("<I")
#: A group larger than this goes on a stream, not in a datagram (a QUIC packet of 1350 bytes carries one).
MAX_DATAGRAM_BYTES = 1200
#: Browser → host binary messages: a tag byte and the pyrofling wire's own payload.
PAGE_MESSAGES: dict[bytes, type[GamepadState] | type[InputState] | type[RateFeedback]] = {
    b"P": GamepadState,
    b"I": InputState,
    b"R": RateFeedback,
}
#: What a page may send in one message (text or binary); more closes it.
MAX_PAGE_MESSAGE_BYTES = 4096


@dataclass(frozen=True, slots=True)
class MediaMessage:
    """A picture (``video``) or a unit of sound, as the page reads it; ``number``: the picture's (None: sound)."""

    video: bool
    idr: bool
    capture_us: int
    pts_us: int
    data: bytes
    number: int | None = None


def video_header(*, idr: bool, capture_us: int, pts_us: int) -> bytes:
    """A picture's ``b"V"`` header (the same for every browser; its number goes before it)."""
    return MEDIA_HEADER.pack(VIDEO_TAG, FLAG_IDR if idr else 0, capture_us, pts_us)


def numbered(number: int, message: bytes) -> bytes:
    """A picture's message as one browser gets it: ``b"S"``, its number there (uint32, wrapping), the message."""
    return STREAM_SEQ.pack(SEQ_TAG, number & 0xFFFFFFFF) + message


def audio_message(data: bytes, *, pts_us: int) -> bytes:
    """A unit of sound: ``b"A"``, flags 0, its pts as both stamps, the codec's packet."""
    return MEDIA_HEADER.pack(AUDIO_TAG, 0, pts_us, pts_us) + data


def sound_group(messages: list[bytes]) -> bytes:
    """Units of sound for a WebTransport session: ``b"G"``, then each one's length and ``b"A"`` message."""
    return GROUP_TAG + b"".join(SOUND_UNIT_LENGTH.pack(len(m)) + m for m in messages)


def parse_media(data: Buffer) -> MediaMessage:
    """A numbered picture or a unit of sound, as a page receives it."""
    data = bytes(data)
    number = None
    if data[:1] == SEQ_TAG:
        if len(data) < STREAM_SEQ.size:
            raise TruncatedError(f"a picture's number needs {STREAM_SEQ.size} bytes, got {len(data)}")
        number = STREAM_SEQ.unpack_from(data)[1]
        data = data[STREAM_SEQ.size :]
    if len(data) < MEDIA_HEADER.size:
        raise TruncatedError(f"a media header needs {MEDIA_HEADER.size} bytes, got {len(data)}")
    tag, flags, capture_us, pts_us = MEDIA_HEADER.unpack_from(data)
    if tag not in (VIDEO_TAG, AUDIO_TAG):
        raise UnknownMessageError(f"a media message starts with V or A, not {tag!r}")
    if (tag == VIDEO_TAG) != (number is not None):
        raise UnknownMessageError("a picture comes numbered, a unit of sound does not")
    return MediaMessage(tag == VIDEO_TAG, bool(flags & FLAG_IDR), capture_us, pts_us, data[MEDIA_HEADER.size :], number)


def parse_sound_group(data: Buffer) -> list[MediaMessage]:
    """The units of sound in a ``b"G"`` group, in order."""
    data = bytes(data)
    if data[:1] != GROUP_TAG:
        raise UnknownMessageError(f"a sound group starts with G, not {data[:1]!r}")
    units, at = [], 1
    while at < len(data):
        if len(data) - at < SOUND_UNIT_LENGTH.size:
            raise TruncatedError("a sound unit's length is cut short")
        (length,) = SOUND_UNIT_LENGTH.unpack_from(data, at)
        at += SOUND_UNIT_LENGTH.size
        if length > len(data) - at:
            raise TruncatedError(f"a sound unit of {length} bytes, {len(data) - at} left")
        unit = parse_media(data[at : at + length])
        if unit.video:
            raise UnknownMessageError("a sound group holds sound only")
        units.append(unit)
        at += length
    return units


def parse_page_message(data: Buffer) -> GamepadState | InputState | RateFeedback:
    """A page's binary message: its pad, its keys and mouse, or its arrivals report (checked)."""
    data = bytes(data)
    kind = PAGE_MESSAGES.get(data[:1])
    if kind is None:
        raise UnknownMessageError(f"a page's binary message starts with P, I or R, not {data[:1]!r}")
    if len(data) != 1 + kind.PAYLOAD.size:
        raise LengthError(f"{kind.__name__} from a page is {1 + kind.PAYLOAD.size} bytes, not {len(data)}")
    message = kind(*kind.PAYLOAD.unpack(data[1:]))
    if isinstance(message, RateFeedback):
        message.check()
    return message


def page_message(message: GamepadState | InputState | RateFeedback) -> bytes:
    """What a page sends for ``message`` (the tools' and the tests' page)."""
    tag = next(t for t, kind in PAGE_MESSAGES.items() if isinstance(message, kind))
    return tag + message.payload()
