"""PyroFling's control messages and their framing (protocol.md §2, §3).

Every struct here maps 1:1 to a table in ``protocol.md``; section numbers in the
comments point there.  The control message *type word* is 8 bytes on the wire
(protocol.md §2.2): writers always emit 8 bytes with the exact values the native
x86-64 build sends; readers accept 4 or 8.  All integers are little-endian.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar, Self

from pyrofling.wire.errors import (
    BadMagicError,
    Buffer,
    FieldError,
    LengthError,
    TruncatedError,
    UnknownMessageError,
)
from pyrofling.wire.records import Record

# --------------------------------------------------------------------------------------------
# Type word (protocol.md §2.1, §2.2)
# --------------------------------------------------------------------------------------------

#: Magic bits of every type word: letters P, Y, R shifted by 26/20/14 (kept to 32 bits),
#: XORed with the version mask 0xaa02 << 16.  See tests/test_wire.py for the derivation.
TYPE_MAGIC = 0xEF968000
TYPE_MAGIC_MASK = 0xFFFFC000
TYPE_ID_MASK = 0x3F
TYPE_LEN_SHIFT = 6
TYPE_LEN_MASK = 0xFF
#: High half of the 8-byte type word for messages that carry a payload (sign extension).
TYPE_HIGH_WITH_PAYLOAD = 0xFFFFFFFF
MAX_CONTROL_PAYLOAD_BYTES = 255
#: Largest TCP control message: 8-byte type word + 255-byte payload.
MAX_CONTROL_MESSAGE_BYTES = 8 + MAX_CONTROL_PAYLOAD_BYTES

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class MessageId(enum.IntEnum):
    """Control message ids (bits 0..5 of the type word), protocol.md §2.3."""

    OK = 0
    NAK = 1
    AGAIN = 2
    HELLO = 3
    COOKIE = 4
    KICK = 5
    PROGRESS = 6
    CODEC_PARAMETERS = 7
    PHASE_OFFSET = 8
    GAMEPAD_STATE = 9
    PING = 10
    # pyrofling extensions (protocol.md §7.2): ids 32–63, only sent to a peer that negotiated them.
    EXTENSIONS = 32
    REQUEST_KEYFRAME = 33
    AUTH_CHALLENGE = 34
    AUTH_RESPONSE = 35
    AUTH_RESULT = 36
    NACK = 37
    LOSS_REPORT = 38
    RATE_FEEDBACK = 39
    STREAM_RATE = 40
    PATH_CHALLENGE = 41
    PATH_RESPONSE = 42
    INPUT_STATE = 43
    PLAYER = 44
    PAD_ASSIGNED = 45
    RUMBLE = 46
    VIEWER_DISPLAY = 47
    VIEWER_CODECS = 48
    VIEWER_PICTURE_RATE = 49


def type_word(message_id: int, payload_bytes: int) -> int:
    """The 32-bit type word for a message id and payload length."""
    if not 0 <= message_id <= TYPE_ID_MASK:
        raise ValueError(f"message id {message_id} does not fit in 6 bits")
    if not 0 <= payload_bytes <= MAX_CONTROL_PAYLOAD_BYTES:
        raise ValueError(f"payload of {payload_bytes} bytes does not fit in 8 bits")
    return TYPE_MAGIC | (payload_bytes << TYPE_LEN_SHIFT) | message_id


def type_word_wide(message_id: int, payload_bytes: int) -> int:
    """The 64-bit value the native build writes (protocol.md §2.2): sign-extended when a payload follows."""
    high = TYPE_HIGH_WITH_PAYLOAD if payload_bytes else 0
    return (high << 32) | type_word(message_id, payload_bytes)


def split_type_word(word: int) -> tuple[int, int]:
    """Validate a 32-bit type word and return ``(message_id, payload_bytes)``."""
    if (word & TYPE_MAGIC_MASK) != TYPE_MAGIC:
        raise BadMagicError(f"type word 0x{word:08x} lacks the PyroFling magic")
    return word & TYPE_ID_MASK, (word >> TYPE_LEN_SHIFT) & TYPE_LEN_MASK


# --------------------------------------------------------------------------------------------
# Control messages (protocol.md §2.3)
# --------------------------------------------------------------------------------------------


class KickFlags(enum.IntFlag):
    """What a KICK subscribes to (protocol.md §2.3, KICK)."""

    NONE = 0
    VIDEO = 1 << 0
    AUDIO = 1 << 1
    GAMEPAD = 1 << 2
    #: pyrofling extension (KEYBOARD_MOUSE, protocol.md §7.11): this connection sends keys and the mouse.
    KEYBOARD_MOUSE = 1 << 3


class VideoCodec(enum.IntEnum):
    NONE = 0
    H264 = 1
    H265 = 2
    AV1 = 3
    PYROWAVE = 4


#: How the command line and the logs name each video codec.
VIDEO_CODEC_NAMES = {
    VideoCodec.NONE: "none",
    VideoCodec.H264: "H.264",
    VideoCodec.H265: "HEVC",
    VideoCodec.AV1: "AV1",
    VideoCodec.PYROWAVE: "PyroWave",
}


class AudioCodec(enum.IntEnum):
    NONE = 0
    OPUS = 1
    AAC = 2
    RAW_S16LE = 3


class ColorProfile(enum.IntEnum):
    BT709_LIMITED_LEFT_420 = 0
    BT709_FULL_CENTER_420 = 1
    BT2020_PQ_LIMITED_LEFT_420 = 2
    BT2020_PQ_FULL_CENTER_420 = 3
    BT709_FULL_444 = 4
    BT2020_PQ_FULL_444 = 5


class GamepadButton(enum.IntFlag):
    """Button bits of GAMEPAD_STATE (protocol.md §2.3)."""

    SOUTH = 1 << 0
    EAST = 1 << 1
    WEST = 1 << 2
    NORTH = 1 << 3
    TL = 1 << 4
    TR = 1 << 5
    THUMB_L = 1 << 6
    THUMB_R = 1 << 7
    START = 1 << 8
    SELECT = 1 << 9
    MODE = 1 << 10


class ControlMessage(Record):
    """Base of every control message.  Subclasses set ``ID`` and ``PAYLOAD``."""

    ID: ClassVar[MessageId]

    @classmethod
    def record_name(cls) -> str:
        return cls.ID.name

    @classmethod
    def parse(cls, data: Buffer) -> Self:
        """Parse one complete message of this type (type word of 4 or 8 bytes, then the payload)."""
        msg = parse_control(data)
        if not isinstance(msg, cls):
            raise UnknownMessageError(f"expected {cls.ID.name}, got {msg.ID.name}")
        return msg

    def encode(self, *, type_width: int = 8) -> bytes:
        """The whole message: type word (8 bytes by default, 4 for a 32-bit peer), then the payload."""
        n = self.payload_bytes()
        if type_width == 8:
            head = _U64.pack(type_word_wide(self.ID, n))
        elif type_width == 4:
            head = _U32.pack(type_word(self.ID, n))
        else:
            raise ValueError("type_width must be 4 or 8")
        return head + self.payload()

    def __bytes__(self) -> bytes:
        return self.encode()


@dataclass(frozen=True, slots=True)
class Ok(ControlMessage):
    ID = MessageId.OK


@dataclass(frozen=True, slots=True)
class Nak(ControlMessage):
    ID = MessageId.NAK


@dataclass(frozen=True, slots=True)
class Again(ControlMessage):
    ID = MessageId.AGAIN


@dataclass(frozen=True, slots=True)
class Hello(ControlMessage):
    ID = MessageId.HELLO


@dataclass(frozen=True, slots=True)
class Cookie(ControlMessage):
    """Server's session cookie (TCP reply to HELLO) and the client's UDP echo of it."""

    ID = MessageId.COOKIE
    PAYLOAD = _U64
    cookie: int

    def __post_init__(self) -> None:
        if not 0 <= self.cookie < 1 << 64:
            raise ValueError("cookie must be a u64")


@dataclass(frozen=True, slots=True)
class Kick(ControlMessage):
    ID = MessageId.KICK
    PAYLOAD = _U32
    flags: KickFlags

    @classmethod
    def parse_payload(cls, data: Buffer) -> Self:
        cls.check_length(data)
        # Unknown bits are kept: a newer peer may set them and must not be refused.
        return cls(KickFlags(_U32.unpack(data)[0]))


@dataclass(frozen=True, slots=True)
class Progress(ControlMessage):
    """Cumulative receive counters a viewer reports (protocol.md §2.3, §3.3)."""

    ID = MessageId.PROGRESS
    PAYLOAD = struct.Struct("<5Q")
    received: int = 0
    fec_recovered: int = 0
    dropped_video: int = 0
    dropped_audio: int = 0
    key_frames: int = 0


@dataclass(frozen=True, slots=True)
class CodecParameters(ControlMessage):
    ID = MessageId.CODEC_PARAMETERS
    PAYLOAD = struct.Struct("<iiiHHHHII")
    video_codec: int
    color_profile: int
    audio_codec: int
    frame_rate_num: int
    frame_rate_den: int
    width: int
    height: int
    channels: int
    rate: int


@dataclass(frozen=True, slots=True)
class PhaseOffset(ControlMessage):
    """Viewer's wish for the frame phase, µs; positive = "deliver later"."""

    ID = MessageId.PHASE_OFFSET
    PAYLOAD = struct.Struct("<i")
    ideal_phase_offset_us: int


@dataclass(frozen=True, slots=True)
class GamepadState(ControlMessage):
    ID = MessageId.GAMEPAD_STATE
    PAYLOAD = struct.Struct("<HHhhhhBBbb")
    seq: int = 0
    buttons: int = 0
    lx: int = 0
    ly: int = 0
    rx: int = 0
    ry: int = 0
    lz: int = 0
    rz: int = 0
    hat_x: int = 0
    hat_y: int = 0


class InputFlags(enum.IntFlag):
    """INPUT_STATE flags (protocol.md §7.11)."""

    NONE = 0
    #: ``abs_x``/``abs_y`` hold where the pointer is over the picture (not captured).
    ABSOLUTE = 1 << 0
    #: The viewer has captured the pointer: motion is relative.
    CAPTURED = 1 << 1


#: Linux key codes an INPUT_STATE can hold (its bitmap's size).
INPUT_KEY_CODES = 256


def key_bitmap(codes: frozenset[int] | set[int]) -> bytes:
    """The 32-byte map of held keys INPUT_STATE and the capture INPUT_EVENT carry: bit k of byte k // 8."""
    out = bytearray(INPUT_KEY_CODES // 8)
    for code in codes:
        if 0 <= code < INPUT_KEY_CODES:
            out[code // 8] |= 1 << (code % 8)
    return bytes(out)


def held_keys(bitmap: bytes) -> frozenset[int]:
    """The key codes a map from :func:`key_bitmap` holds."""
    return frozenset(i * 8 + b for i, byte in enumerate(bitmap) if byte for b in range(8) if byte >> b & 1)


@dataclass(frozen=True, slots=True)
class InputState(ControlMessage):
    """pyrofling extension (protocol.md §7.11), viewer → host over UDP: the keyboard and mouse as they are now.

    A state, not events: which keys and buttons are held, and motion and wheel as running totals since the
    connection began (wrapping at 2**32), so a lost datagram loses nothing and nothing stays held."""

    ID = MessageId.INPUT_STATE
    PAYLOAD = struct.Struct("<HBB32siiiiHHH")
    seq: int = 0
    buttons: int = 0  # bit 0 left, 1 right, 2 middle, 3 side, 4 extra
    flags: int = 0
    keys: bytes = bytes(32)  # bit k of byte k // 8: Linux key code k is held
    dx_total: int = 0
    dy_total: int = 0
    wheel_total: int = 0  # detents, up positive
    hwheel_total: int = 0  # detents, right positive
    abs_x: int = 0  # 0..65535 across the picture
    abs_y: int = 0
    reserved: int = 0

    def held(self) -> frozenset[int]:
        """The key codes held."""
        return held_keys(self.keys)


@dataclass(frozen=True, slots=True)
class Player(ControlMessage):
    """pyrofling extension (protocol.md §7.12), viewer → host over TCP before KICK: who plays, across reconnects."""

    ID = MessageId.PLAYER
    PAYLOAD = struct.Struct("<Q")
    token: int  # random, drawn once per viewer run


@dataclass(frozen=True, slots=True)
class PadAssigned(ControlMessage):
    """pyrofling extension (protocol.md §7.12), host → viewer over TCP: the pad this connection drives."""

    ID = MessageId.PAD_ASSIGNED
    PAYLOAD = struct.Struct("<II")
    pad: int  # 1..pads; 0: every pad is taken
    pads: int


@dataclass(frozen=True, slots=True)
class Rumble(ControlMessage):
    """pyrofling extension (protocol.md §7.13), host → viewer over TCP: the player's pad's motors, from now on."""

    ID = MessageId.RUMBLE
    PAYLOAD = struct.Struct("<BBHHHH")
    pad: int  # the host's pad it is for (the viewer's own, as PAD_ASSIGNED said; 1 on a shared pad)
    reserved: int
    strong: int  # 0..65535: the low-frequency (heavy) motor
    weak: int  # 0..65535: the high-frequency (light) motor
    duration_ms: int  # 0: stop; 65535: until the next RUMBLE
    seq: int  # counts RUMBLE messages per connection (benches match them)


@dataclass(frozen=True, slots=True)
class ViewerDisplay(ControlMessage):
    """pyrofling extension (protocol.md §7.14), viewer → host over TCP: the picture it would show at one to one (its
    display or window, in pixels) and its refresh rate; a host that makes its desktop may make it that size."""

    ID = MessageId.VIEWER_DISPLAY
    PAYLOAD = struct.Struct("<HHI")
    width: int
    height: int
    refresh_mhz: int  # 0: unknown


@dataclass(frozen=True, slots=True)
class ViewerCodecs(ControlMessage):
    """pyrofling extension (protocol.md §7.15), viewer → host over TCP: the video codecs it decodes, one bit per codec
    id (bit 1 H.264, bit 2 H.265, bit 3 AV1); a host that chooses its codec (``--codec auto``) streams one that every
    viewer watching takes."""

    ID = MessageId.VIEWER_CODECS
    PAYLOAD = struct.Struct("<I")
    codec_bits: int

    @classmethod
    def of(cls, codecs: Iterable[VideoCodec]) -> ViewerCodecs:
        return cls(sum(1 << int(c) for c in set(codecs)))

    def codecs(self) -> frozenset[VideoCodec]:
        """The codecs named, of those this build knows (other bits are ignored)."""
        return frozenset(c for c in VideoCodec if c != VideoCodec.NONE and self.codec_bits >> int(c) & 1)


@dataclass(frozen=True, slots=True)
class ViewerPictureRate(ControlMessage):
    """pyrofling extension (protocol.md §7.16), viewer → host over TCP: the most pictures a second it asks for (a
    viewer whose pictures come too unevenly for its display's rate asks for half of it); 0: the host's own."""

    ID = MessageId.VIEWER_PICTURE_RATE
    PAYLOAD = struct.Struct("<I")
    rate_mhz: int


@dataclass(frozen=True, slots=True)
class Ping(ControlMessage):
    ID = MessageId.PING
    PAYLOAD = struct.Struct("<H")
    seq: int


class ExtensionFeature(enum.IntFlag):
    """Feature bits of the EXTENSIONS message (protocol.md §7.2)."""

    NONE = 0
    #: The viewer may send REQUEST_KEYFRAME instead of waiting for PROGRESS to show loss.
    KEYFRAME_REQUEST = 1 << 0
    #: Authentication with a password, pairing code or stored pairing (protocol.md §7.7).  A host that grants it
    #: requires it, and always with ENCRYPTION.
    AUTH = 1 << 1
    #: Everything after the handshake sealed with AES-GCM under keys from the authentication, the control channel
    #: and the datagrams in both directions (protocol.md §7.7).
    ENCRYPTION = 1 << 2
    #: The viewer sends LOSS_REPORT several times a second; the host's FEC follows it (protocol.md §7.9).
    LOSS_REPORTS = 1 << 3
    #: The viewer asks for missing datagrams with NACK and the host sends them again (protocol.md §7.9).
    NACK = 1 << 4
    #: Reed–Solomon repair blocks (both XOR degrees 0 in the header) instead of mirrored XOR (protocol.md §7.8).
    MDS_FEC = 1 << 5
    #: The viewer sends RATE_FEEDBACK; the host fits the stream to the link and says so with STREAM_RATE (§7.10).
    RATE_CONTROL = 1 << 6
    #: The viewer sends INPUT_STATE (keys, mouse buttons, motion, wheel); the host feeds a keyboard and a mouse
    #: (protocol.md §7.11).
    KEYBOARD_MOUSE = 1 << 7
    #: A pad per player: the viewer says who it is (PLAYER), the host says which pad is its (PAD_ASSIGNED)
    #: (protocol.md §7.12).
    PADS = 1 << 8
    #: The host sends RUMBLE: what games ask of the player's pad's motors (protocol.md §7.13).
    RUMBLE = 1 << 9
    #: The viewer says its display's size and refresh rate (VIEWER_DISPLAY); a host that makes its own desktop
    #: sizes it to them (protocol.md §7.14).
    DISPLAY = 1 << 10
    #: The viewer says which video codecs it decodes (VIEWER_CODECS); a host that chooses streams one that every
    #: viewer takes, and tells it with CODEC_PARAMETERS when it changes (protocol.md §7.15).
    CODECS = 1 << 11
    #: The viewer may ask for fewer pictures a second (VIEWER_PICTURE_RATE); the host makes the lowest rate asked
    #: that divides its own and says so with CODEC_PARAMETERS (protocol.md §7.16).
    PICTURE_RATE = 1 << 12


#: Every feature this build knows: what a pyrofling viewer asks for, and (less AUTH and ENCRYPTION, which a host
#: grants only with a secret) what a pyrofling host grants.
ALL_EXTENSIONS = ExtensionFeature(sum(ExtensionFeature))

#: Version of the pyrofling extension set this build speaks.
EXTENSIONS_VERSION = 1


@dataclass(frozen=True, slots=True)
class Extensions(ControlMessage):
    """pyrofling extension negotiation (protocol.md §7.2): version and feature bits."""

    ID = MessageId.EXTENSIONS
    PAYLOAD = struct.Struct("<II")
    version: int
    features: int

    @property
    def feature_flags(self) -> ExtensionFeature:
        # Unknown bits from a newer peer are dropped here: nobody can use them.
        return ExtensionFeature(self.features) & ALL_EXTENSIONS


@dataclass(frozen=True, slots=True)
class RequestKeyframe(ControlMessage):
    """pyrofling extension (protocol.md §7.2): the viewer lost video and wants a key frame now."""

    ID = MessageId.REQUEST_KEYFRAME


class AuthMethod(enum.IntEnum):
    """How a viewer authenticates (protocol.md §7.7)."""

    #: The password or pairing code, through the SPAKE2 PAKE: nothing on the wire to test guesses against.
    CODE = 1
    #: The credential stored when it paired, with a fresh X25519 exchange.
    PAIRED = 2


class AuthStatus(enum.IntEnum):
    REFUSED = 0
    ACCEPTED = 1
    #: Too many wrong secrets: refused without a try for ``retry_after_ms``.
    BLOCKED = 2


#: AUTH_RESPONSE flags: bit 0, remember this viewer (pair it) when the code is right.
AUTH_FLAG_PAIR = 1
PAKE_MESSAGE_BYTES = 33


@dataclass(frozen=True, slots=True)
class AuthChallenge(ControlMessage):
    """pyrofling extension (protocol.md §7.7), host → viewer: who the host is and how a viewer may prove itself."""

    ID = MessageId.AUTH_CHALLENGE
    PAYLOAD = struct.Struct("<16s32s33s32sI32s")
    host_id: bytes  # the host's lasting identity, the hash of host_key: a paired viewer finds its credential by it
    host_nonce: bytes  # fresh for this connection
    pake_message: bytes  # the host's SPAKE2 message (zeros when it takes no code)
    host_share: bytes  # an X25519 public key, fresh for this connection (for PAIRED)
    methods: int  # bit (1 << AuthMethod): the methods this host takes
    host_key: bytes = bytes(32)  # its lasting Ed25519 public key; AUTH_RESULT(1) carries its signature

    def check(self) -> None:
        if not self.methods & ((1 << AuthMethod.CODE) | (1 << AuthMethod.PAIRED)):
            raise FieldError(f"AUTH_CHALLENGE offers no method (0x{self.methods:x})")


@dataclass(frozen=True, slots=True)
class AuthResponse(ControlMessage):
    """pyrofling extension (protocol.md §7.7), viewer → host: its method, its share of the key exchange, its proof."""

    ID = MessageId.AUTH_RESPONSE
    PAYLOAD = struct.Struct("<II16s32s33s32s32s")
    method: int
    flags: int
    viewer_id: bytes  # PAIRED: which credential; CODE with AUTH_FLAG_PAIR: the id it will be known by
    viewer_nonce: bytes
    viewer_message: bytes  # CODE: its SPAKE2 message; PAIRED: an X25519 public key and a zero byte
    name: bytes  # when pairing: how the host lists it (UTF-8, zero-padded)
    proof: bytes

    def check(self) -> None:
        if self.method not in AuthMethod._value2member_map_:
            raise FieldError(f"AUTH_RESPONSE method {self.method} is unknown")

    def unproved(self) -> bytes:
        """The message as the transcript binds it: everything but the proof."""
        return self.encode()[: -len(self.proof)]


@dataclass(frozen=True, slots=True)
class AuthResult(ControlMessage):
    """pyrofling extension (protocol.md §7.7), host → viewer: accepted (with the host's proof), refused or blocked."""

    ID = MessageId.AUTH_RESULT
    PAYLOAD = struct.Struct("<II32s64s")
    status: int
    retry_after_ms: int
    proof: bytes
    signature: bytes = bytes(64)  # accepted: the host key's Ed25519 signature over the handshake (zeros otherwise)

    def check(self) -> None:
        if self.status not in AuthStatus._value2member_map_:
            raise FieldError(f"AUTH_RESULT status {self.status} is unknown")


@dataclass(frozen=True, slots=True)
class PathChallenge(ControlMessage):
    """pyrofling extension (protocol.md §7.7), host → viewer over UDP, sealed: is this address really yours?"""

    ID = MessageId.PATH_CHALLENGE
    PAYLOAD = struct.Struct("<Q")
    token: int


@dataclass(frozen=True, slots=True)
class PathResponse(ControlMessage):
    """pyrofling extension (protocol.md §7.7), viewer → host over UDP, sealed: the token, from the new address."""

    ID = MessageId.PATH_RESPONSE
    PAYLOAD = struct.Struct("<Q")
    token: int


#: Blocks one NACK can name: a bitmap of 16 bytes after ``first_block``.
NACK_BITMAP_BLOCKS = 128


@dataclass(frozen=True, slots=True)
class Nack(ControlMessage):
    """pyrofling extension (protocol.md §7.9), viewer → host over UDP: send these datagrams of a packet again.

    Bit ``b`` of ``bitmap`` byte ``B`` names data block ``first_block + 8·B + b``.  ``whole`` (flags bit 0):
    nothing of the packet arrived, so its size is unknown: send every data block.
    """

    ID = MessageId.NACK
    PAYLOAD = struct.Struct("<HBBI16s")
    packet_seq: int
    stream: int  # 0 video, 1 audio
    flags: int
    first_block: int
    bitmap: bytes

    WHOLE: ClassVar[int] = 1

    def check(self) -> None:
        if self.packet_seq > 0x3FFF or self.stream > 1:
            raise FieldError(f"NACK for packet {self.packet_seq} of stream {self.stream} is out of range")

    @property
    def whole(self) -> bool:
        return bool(self.flags & self.WHOLE)

    def blocks(self) -> list[int]:
        """The data block indices it names, ascending."""
        bits = int.from_bytes(self.bitmap, "little")
        return [self.first_block + i for i in range(NACK_BITMAP_BLOCKS) if bits >> i & 1]

    @classmethod
    def for_blocks(cls, packet_seq: int, stream: int, blocks: list[int]) -> list[Nack]:
        """As few NACKs as name ``blocks`` (sorted, distinct)."""
        out: list[Nack] = []
        i = 0
        while i < len(blocks):
            first, bits = blocks[i], 0
            while i < len(blocks) and blocks[i] - first < NACK_BITMAP_BLOCKS:
                bits |= 1 << (blocks[i] - first)
                i += 1
            out.append(cls(packet_seq, stream, 0, first, bits.to_bytes(16, "little")))
        return out

    @classmethod
    def whole_packet(cls, packet_seq: int, stream: int) -> Nack:
        return cls(packet_seq, stream, cls.WHOLE, 0, bytes(16))


@dataclass(frozen=True, slots=True)
class LossReport(ControlMessage):
    """pyrofling extension (protocol.md §7.9), viewer → host over UDP: what happened since the last report."""

    ID = MessageId.LOSS_REPORT
    PAYLOAD = struct.Struct("<IIIIIIHH")
    seq: int
    datagrams_expected: int  # video datagrams the host sent (data and repair) whose fate is known
    datagrams_lost: int  # of those, lost on the way (before any resend)
    rebuilt_by_fec: int  # video packets that needed repair blocks
    rebuilt_by_resend: int  # video packets completed by resent datagrams
    packets_lost: int  # video packets given up
    bursts: int  # runs of consecutive lost datagrams
    longest_burst: int  # datagrams

    def check(self) -> None:
        if self.datagrams_lost > self.datagrams_expected:
            raise FieldError("LOSS_REPORT says more datagrams were lost than sent")


#: Arrival samples one RATE_FEEDBACK carries at most.
RATE_SAMPLES = 8
_RATE_SAMPLE = struct.Struct("<HHII")


@dataclass(frozen=True, slots=True)
class ArrivalSample:
    """When a video packet's datagrams arrived at the viewer (its clock, µs, modulo 2³²)."""

    packet_seq: int
    datagrams: int  # how many of its datagrams (data and repair, first transmissions or resent) arrived
    first_arrival_us: int
    last_arrival_us: int


#: How often a viewer that negotiated RATE_CONTROL sends RATE_FEEDBACK (protocol.md §7.10).
RATE_FEEDBACK_INTERVAL_S = 0.05


@dataclass(frozen=True, slots=True)
class RateFeedback(ControlMessage):
    """pyrofling extension (protocol.md §7.10), viewer → host over UDP, every 50 ms: what arrived, and when."""

    ID = MessageId.RATE_FEEDBACK
    PAYLOAD = struct.Struct(f"<IIIHH{RATE_SAMPLES * _RATE_SAMPLE.size}s")
    seq: int
    interval_us: int  # on the viewer's clock, since the previous RATE_FEEDBACK
    bytes_received: int  # media datagrams, as they came off the wire, in that interval
    count: int  # samples used
    reserved: int
    samples_raw: bytes

    def check(self) -> None:
        if self.count > RATE_SAMPLES:
            raise FieldError(f"RATE_FEEDBACK says {self.count} samples; it holds {RATE_SAMPLES}")
        if any(s.packet_seq > 0x3FFF for s in self.samples):
            raise FieldError("RATE_FEEDBACK names a packet sequence beyond 14 bits")

    @property
    def samples(self) -> list[ArrivalSample]:
        return [
            ArrivalSample(*_RATE_SAMPLE.unpack_from(self.samples_raw, i * _RATE_SAMPLE.size)) for i in range(self.count)
        ]

    @classmethod
    def build(cls, seq: int, interval_us: int, bytes_received: int, samples: list[ArrivalSample]) -> RateFeedback:
        """The newest :data:`RATE_SAMPLES` of ``samples`` (oldest first), times wrapped to 32 bits."""
        used = samples[-RATE_SAMPLES:]
        raw = b"".join(
            _RATE_SAMPLE.pack(
                s.packet_seq, min(s.datagrams, 0xFFFF), s.first_arrival_us & 0xFFFFFFFF, s.last_arrival_us & 0xFFFFFFFF
            )
            for s in used
        )
        return cls(
            seq & 0xFFFFFFFF,
            min(interval_us, 0xFFFFFFFF),
            min(bytes_received, 0xFFFFFFFF),
            len(used),
            0,
            raw.ljust(RATE_SAMPLES * _RATE_SAMPLE.size, b"\0"),
        )


class RateDecider(enum.IntEnum):
    """What set the stream's bitrate, as STREAM_RATE tells a viewer (protocol.md §7.10)."""

    YOUR_LINK = 0
    CEILING = 1
    OTHER_VIEWER = 2
    FLOOR = 3
    FIXED = 4


@dataclass(frozen=True, slots=True)
class StreamRate(ControlMessage):
    """pyrofling extension (protocol.md §7.10), host → viewer over TCP: the encoder's bitrate and why."""

    ID = MessageId.STREAM_RATE
    PAYLOAD = struct.Struct("<IIIB3s")
    bitrate_kbits: int
    ceiling_kbits: int
    your_link_kbits: int  # what the host estimates this viewer's link carries for the video (0: unknown)
    decided_by: int  # RateDecider
    reserved: bytes = bytes(3)

    def check(self) -> None:
        if self.decided_by not in RateDecider._value2member_map_:
            raise FieldError(f"STREAM_RATE decided_by {self.decided_by} is unknown")


CONTROL_TYPES: dict[int, type[ControlMessage]] = {
    cls.ID: cls
    for cls in (
        Ok,
        Nak,
        Again,
        Hello,
        Cookie,
        Kick,
        Progress,
        CodecParameters,
        PhaseOffset,
        GamepadState,
        Ping,
        Extensions,
        RequestKeyframe,
        AuthChallenge,
        AuthResponse,
        AuthResult,
        Nack,
        LossReport,
        RateFeedback,
        StreamRate,
        PathChallenge,
        PathResponse,
        InputState,
        Player,
        PadAssigned,
        Rumble,
        ViewerDisplay,
        ViewerCodecs,
        ViewerPictureRate,
    )
}

#: A sealed viewer → host datagram (protocol.md §7.7) starts with these 4 bytes and the connection's cookie, so the
#: host knows whose key opens it.  They are not a type word (the magic bits differ): a native host drops it.
SEALED_MAGIC = b"PYRS"
SEALED_HEAD = struct.Struct("<4sQ")


def sealed_cookie(data: Buffer) -> int | None:
    """The cookie of a sealed viewer → host datagram, or None when it is not one."""
    if len(data) < SEALED_HEAD.size or bytes(data[:4]) != SEALED_MAGIC:
        return None
    cookie: int = SEALED_HEAD.unpack_from(data)[1]
    return cookie


#: Messages a client may send over UDP (protocol.md §3.2); anything else there is dropped.
UDP_CLIENT_TYPES = frozenset(
    {
        MessageId.COOKIE,
        MessageId.PHASE_OFFSET,
        MessageId.GAMEPAD_STATE,
        MessageId.PING,
        MessageId.NACK,
        MessageId.LOSS_REPORT,
        MessageId.RATE_FEEDBACK,
        MessageId.PATH_RESPONSE,
        MessageId.INPUT_STATE,
    }
)


def _message_class(message_id: int, payload_bytes: int) -> type[ControlMessage]:
    cls = CONTROL_TYPES.get(message_id)
    if cls is None:
        raise UnknownMessageError(f"unknown control message id {message_id}")
    if cls.payload_bytes() != payload_bytes:
        raise LengthError(f"{cls.ID.name} type word says {payload_bytes} payload bytes, expected {cls.payload_bytes()}")
    return cls


def parse_control(data: Buffer) -> ControlMessage:
    """Parse one complete control message (a UDP datagram, or one framed TCP message).

    The type word may be 4 or 8 bytes; the datagram length decides (``4 + n`` or ``8 + n``).
    """
    view = memoryview(data)
    if len(view) < 4:
        raise TruncatedError(f"control message of {len(view)} bytes is shorter than a type word")
    message_id, n = split_type_word(_U32.unpack_from(view)[0])
    cls = _message_class(message_id, n)
    if len(view) == 8 + n:
        high = _U32.unpack_from(view, 4)[0]
        if high not in (0, TYPE_HIGH_WITH_PAYLOAD):
            raise FieldError(f"high half of the type word is 0x{high:08x}")
        return cls.parse_payload(view[8:])
    if len(view) == 4 + n:
        return cls.parse_payload(view[4:])
    if len(view) < 4 + n:
        raise TruncatedError(f"{cls.ID.name} needs {n} payload bytes, got {len(view) - 4}")
    raise LengthError(f"{cls.ID.name} message is {len(view)} bytes, expected {4 + n} or {8 + n}")


def parse_udp_control(data: Buffer) -> ControlMessage:
    """Parse a client→server UDP datagram; only the types allowed on UDP are accepted."""
    msg = parse_control(data)
    if msg.ID not in UDP_CLIENT_TYPES:
        raise UnknownMessageError(f"{msg.ID.name} is not a UDP message")
    return msg


def parse_record_message(data: Buffer) -> ControlMessage | UnknownControl:
    """The one control message a sealed record carries (protocol.md §7.7): always the 8-byte type word, exactly
    the payload it announces; an unknown id comes back as :class:`UnknownControl` (answered with NAK)."""
    view = memoryview(data)
    if len(view) < 8:
        raise TruncatedError(f"a sealed record holds {len(view)} bytes, less than a type word")
    message_id, n = split_type_word(_U32.unpack_from(view)[0])
    high = _U32.unpack_from(view, 4)[0]
    if high != (TYPE_HIGH_WITH_PAYLOAD if n else 0):
        raise FieldError(f"high half of the type word is 0x{high:08x}")
    if len(view) != 8 + n:
        raise LengthError(f"a sealed record holds {len(view)} bytes for a message of {8 + n}")
    cls = _message_class(message_id, n) if message_id in CONTROL_TYPES else None
    return cls.parse_payload(view[8:]) if cls else UnknownControl(message_id, bytes(view[8:]))


@dataclass(frozen=True, slots=True)
class UnknownControl:
    """A framed TCP message with valid magic but an id this build does not know."""

    message_id: int
    payload: bytes


class ControlFramer:
    """Incremental decoder for the TCP control stream (protocol.md §3.1).

    Driven by the connection shell: call :meth:`feed` with whatever ``recv``
    returned and handle the messages it returns.  It learns the peer's type-word
    width from the first message and keeps it: after a payload-less message the
    next four bytes are either its zero high half (8-byte peer) or the next type
    word (4-byte peer), which can never be zero, so the width is never guessed.
    A well-formed message of an id this build does not know comes out as
    :class:`UnknownControl` (answer it with NAK, protocol.md §3.1); a
    :class:`ProtocolError` means the stream is unusable: close the connection.
    """

    def __init__(self, *, max_buffer_bytes: int = 64 * 1024) -> None:
        self.type_width: int | None = None
        self._buf = bytearray()
        self._max_buffer_bytes = max_buffer_bytes
        self._skip_zero_high = False

    def feed(self, data: bytes) -> list[ControlMessage | UnknownControl]:
        self.push(data)
        out: list[ControlMessage | UnknownControl] = []
        while True:
            msg = self._next()
            if msg is None:
                break
            out.append(msg)
        # What is left is the start of one message; the limit bounds it, not what one read brought
        # (a read of many whole messages plus a partial one is normal for a busy peer).
        if len(self._buf) > self._max_buffer_bytes:
            raise LengthError("control stream buffer overflow")
        return out

    def push(self, data: bytes) -> None:
        """Buffer bytes without parsing them (take the messages with :meth:`next`)."""
        self._buf += data

    def next(self) -> ControlMessage | UnknownControl | None:
        """The next whole message buffered, or None."""
        return self._next()

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def take_rest(self) -> bytes:
        """What is buffered past the last message, handed over (the stream goes on in another framing)."""
        rest = bytes(self._buf)
        self._buf.clear()
        return rest

    def _next(self) -> ControlMessage | UnknownControl | None:
        buf = self._buf
        if self._skip_zero_high:
            if len(buf) < 4:
                return None
            self._skip_zero_high = False
            if _U32.unpack_from(buf)[0] == 0:
                self.type_width = 8
                del buf[:4]
            else:
                self.type_width = 4
        if len(buf) < 4:
            return None
        message_id, n = split_type_word(_U32.unpack_from(buf)[0])
        cls = _message_class(message_id, n) if message_id in CONTROL_TYPES else None
        width = self.type_width
        if width is None:
            if n == 0:
                # Deliver now; the next 4 bytes tell the width (see class docstring).
                self._skip_zero_high = True
                del buf[:4]
                return cls.parse_payload(b"") if cls else UnknownControl(message_id, b"")
            if len(buf) < 8:
                return None
            width = 8 if _U32.unpack_from(buf, 4)[0] == TYPE_HIGH_WITH_PAYLOAD else 4
            self.type_width = width
        if len(buf) < width + n:
            return None
        if width == 8:
            high = _U32.unpack_from(buf, 4)[0]
            if high != (TYPE_HIGH_WITH_PAYLOAD if n else 0):
                raise FieldError(f"high half of the type word is 0x{high:08x}")
        payload = bytes(buf[width : width + n])
        del buf[: width + n]
        return cls.parse_payload(payload) if cls else UnknownControl(message_id, payload)
