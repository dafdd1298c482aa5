"""The local capture protocol (protocol.md §8): messages between a game and the host.

Pure: packing and parsing only, no sockets (the game's side is :mod:`pyrofling.capture`,
the host's :mod:`pyrofling.server.capture`).  One message per ``SOCK_SEQPACKET``
datagram: a 32-byte header (magic, serial, type, payload length, reserved) and a
payload, at most 1024 bytes in all; file descriptors (one ``memfd`` per image)
travel beside it as ``SCM_RIGHTS``.  The framing and the numbers of the messages
both sides share are PyroFling's (its `ipc/` sources; protocol.md §8.7); the image group describes shared
memory in a pixel format instead of Vulkan memory, and pyrofling adds gamepad
events, audio and error texts.

Requests carry serials 1, 2, 3…; the host answers each with a reply of the same
serial, in order.  Events from the host carry serial 0 and the EVENT bit in their
type.  A request with the ONE_WAY bit gets no reply (audio, which must not wait).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import ClassVar

from pyrofling.wire.control import GamepadState, held_keys
from pyrofling.wire.errors import BadMagicError, Buffer, FieldError, LengthError, TruncatedError
from pyrofling.wire.records import Record

MAGIC = 0x7538244ABD122F9F
HEADER = struct.Struct("<QQIIQ")
MAX_MESSAGE_BYTES = 1024
MAX_PAYLOAD_BYTES = MAX_MESSAGE_BYTES - HEADER.size
MAX_FDS = 16
EVENT = 0x8000_0000
ONE_WAY = 0x4000_0000
VERSION = 1


class MessageType(enum.IntEnum):
    OK = 1
    ERROR_PROTOCOL = 2
    ERROR = 3
    ERROR_PARAMETER = 4
    DEVICE = 101  # PyroFling's Vulkan layer: which GPU its images live on
    IMAGE_GROUP = 102
    PRESENT_IMAGE = 103
    ACQUIRE_IMAGE = 104 | EVENT
    FRAME_COMPLETE = 105 | EVENT
    RETIRE_IMAGE = 106 | EVENT
    CLIENT_HELLO = 200
    SERVER_HELLO = 201
    # pyrofling additions
    GAMEPAD_STATE = 300 | EVENT
    AUDIO_FORMAT = 301
    AUDIO_SAMPLES = 302 | ONE_WAY
    INPUT_EVENT = 303 | EVENT
    PAD_STATE = 304 | EVENT
    RUMBLE = 305 | ONE_WAY


class Intent(enum.IntEnum):
    VULKAN_EXTERNAL_STREAM = 1  # PyroFling's Vulkan layer: images in exported Vulkan memory
    ECHO = 2
    SHARED_MEMORY_FRAMES = 3  # pyrofling: CPU images in memfds


class PixelFormat(enum.IntEnum):
    """Byte order of a pixel in memory, as PyAV names it."""

    RGBA = 1
    BGRA = 2
    RGB = 3
    BGR = 4

    @property
    def bytes_per_pixel(self) -> int:
        return 4 if self in (PixelFormat.RGBA, PixelFormat.BGRA) else 3

    @property
    def av_name(self) -> str:
        return {1: "rgba", 2: "bgra", 3: "rgb24", 4: "bgr24"}[self.value]

    @classmethod
    def named(cls, name: str) -> PixelFormat:
        aliases = {"rgba": 1, "bgra": 2, "rgb": 3, "rgb24": 3, "bgr": 4, "bgr24": 4, "rgbx": 1, "bgrx": 2}
        try:
            return cls(aliases[name.lower()])
        except KeyError:
            raise ValueError(f"unknown pixel format {name!r}; use rgba, bgra, rgb or bgr") from None


class ServerCapability(enum.IntFlag):
    GAMEPAD_EVENTS = 1
    AUDIO = 2
    INPUT_EVENTS = 4


@dataclass(frozen=True, slots=True)
class Header:
    serial: int
    type: int
    payload_bytes: int


def pack(serial: int, type_: int, payload: bytes = b"") -> bytes:
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"capture payload of {len(payload)} bytes exceeds {MAX_PAYLOAD_BYTES}")
    return HEADER.pack(MAGIC, serial, type_, len(payload), 0) + payload


def unpack(data: Buffer) -> tuple[Header, memoryview]:
    """Split one datagram into its header and payload; ProtocolError if it is not a whole message."""
    view = memoryview(data).cast("B")
    if len(view) < HEADER.size:
        raise TruncatedError(f"capture message of {len(view)} bytes is shorter than its {HEADER.size}-byte header")
    if len(view) > MAX_MESSAGE_BYTES:
        raise LengthError(f"capture message of {len(view)} bytes exceeds {MAX_MESSAGE_BYTES}")
    magic, serial, type_, length, _reserved = HEADER.unpack_from(view)
    if magic != MAGIC:
        raise BadMagicError(f"bad capture magic {magic:#018x}")
    if length != len(view) - HEADER.size:
        raise LengthError(f"capture header says {length} payload bytes, the datagram has {len(view) - HEADER.size}")
    return Header(serial, type_, length), view[HEADER.size :]


# --------------------------------------------------------------------------------------------
# Payloads
# --------------------------------------------------------------------------------------------


class CaptureMessage(Record):
    """Base of the capture protocol's fixed-size messages.  Subclasses set ``TYPE`` and ``PAYLOAD``."""

    TYPE: ClassVar[MessageType]

    @classmethod
    def record_name(cls) -> str:
        return cls.TYPE.name

    def encode(self, serial: int) -> bytes:
        """The whole message: the 32-byte header with ``serial``, then the payload."""
        return pack(serial, self.TYPE, self.payload())


@dataclass(frozen=True, slots=True)
class ClientHello(CaptureMessage):
    TYPE = MessageType.CLIENT_HELLO
    PAYLOAD = struct.Struct("<I252s")
    intent: int
    name: bytes = b""

    @classmethod
    def of(cls, name: str, intent: Intent = Intent.SHARED_MEMORY_FRAMES) -> ClientHello:
        return cls(int(intent), name.encode()[:251])

    @classmethod
    def parse_payload(cls, data: Buffer) -> ClientHello:
        cls.check_length(data)
        intent, name = cls.PAYLOAD.unpack(data)
        return cls(intent, name.split(b"\0", 1)[0])

    @property
    def text_name(self) -> str:
        return self.name.split(b"\0", 1)[0].decode(errors="replace")


@dataclass(frozen=True, slots=True)
class ServerHello(CaptureMessage):
    TYPE = MessageType.SERVER_HELLO
    PAYLOAD = struct.Struct("<IIII48x")
    version: int
    capabilities: int
    #: The host's nominal heartbeat period in ns (games may use it before the first FrameComplete).
    period_ns: int
    reserved: int = 0


@dataclass(frozen=True, slots=True)
class ImageGroup(CaptureMessage):
    """``num_images`` images of ``height`` rows of ``stride`` bytes; one memfd each rides along."""

    TYPE = MessageType.IMAGE_GROUP
    PAYLOAD = struct.Struct("<IIIIII")
    num_images: int
    width: int
    height: int
    pixel_format: int
    stride: int
    flags: int = 0

    MAX_IMAGES: ClassVar[int] = MAX_FDS
    MAX_SIDE: ClassVar[int] = 8192

    def check(self) -> None:
        if not 1 <= self.num_images <= self.MAX_IMAGES:
            raise FieldError(f"an image group has 1..{self.MAX_IMAGES} images, not {self.num_images}")
        if not (16 <= self.width <= self.MAX_SIDE and 16 <= self.height <= self.MAX_SIDE):
            raise FieldError(f"image size {self.width}x{self.height} is outside 16..{self.MAX_SIDE}")
        try:
            fmt = PixelFormat(self.pixel_format)
        except ValueError:
            raise FieldError(f"unknown pixel format {self.pixel_format}") from None
        if self.stride < self.width * fmt.bytes_per_pixel or self.stride > 4 * self.MAX_SIDE:
            raise FieldError(f"stride {self.stride} does not fit {self.width} {fmt.name} pixels")
        if self.flags:
            raise FieldError(f"unknown image flags {self.flags:#x} (none are defined)")

    @property
    def format(self) -> PixelFormat:
        return PixelFormat(self.pixel_format)

    @property
    def image_bytes(self) -> int:
        return self.stride * self.height


@dataclass(frozen=True, slots=True)
class PresentImage(CaptureMessage):
    """``period`` ≥ 1: FIFO (each present a later heartbeat); 0: MAILBOX (the newest wins)."""

    TYPE = MessageType.PRESENT_IMAGE
    PAYLOAD = struct.Struct("<QHHIQ")
    image_group_serial: int
    period: int
    index: int
    flags: int
    present_id: int

    def check(self) -> None:
        if self.present_id == 0:
            raise FieldError("present ids start at 1")


@dataclass(frozen=True, slots=True)
class AcquireImage(CaptureMessage):
    TYPE = MessageType.ACQUIRE_IMAGE
    PAYLOAD = struct.Struct("<QII")
    image_group_serial: int
    index: int
    semaphore_type: int = 0  # PyroFling's field; 0 = none (CPU images need no semaphore)


@dataclass(frozen=True, slots=True)
class RetireImage(CaptureMessage):
    TYPE = MessageType.RETIRE_IMAGE
    PAYLOAD = struct.Struct("<QII")
    image_group_serial: int
    index: int
    padding: int = 0


@dataclass(frozen=True, slots=True)
class FrameComplete(CaptureMessage):
    """A heartbeat completed ``presented_id``: FIFO games present again when they see it."""

    TYPE = MessageType.FRAME_COMPLETE
    PAYLOAD = struct.Struct("<QQQQIIQ")
    image_group_serial: int
    timestamp: int  # heartbeats completed
    period_ns: int
    presented_id: int
    flags: int = 0
    delayed_count: int = 0  # presents superseded before they were encoded, so far
    headroom_ns: int = 0  # time from this event to the next heartbeat


# --------------------------------------------------------------------------------------------
# PyroFling's Vulkan layer (intent VULKAN_EXTERNAL_STREAM): the same message numbers, Vulkan payloads
# --------------------------------------------------------------------------------------------


class VkFormat(enum.IntEnum):
    """The swapchain formats a layer may send (VkFormat values)."""

    R8G8B8A8_UNORM = 37
    R8G8B8A8_SRGB = 43
    B8G8R8A8_UNORM = 44
    B8G8R8A8_SRGB = 50
    A8B8G8R8_UNORM_PACK32 = 51
    A8B8G8R8_SRGB_PACK32 = 57
    A2R10G10B10_UNORM_PACK32 = 58
    A2B10G10R10_UNORM_PACK32 = 64
    R16G16B16A16_SFLOAT = 97


#: VkColorSpaceKHR values PyroFling's server accepts.
COLOR_SPACE_SRGB_NONLINEAR = 0
COLOR_SPACE_EXTENDED_SRGB_LINEAR = 1000104002
COLOR_SPACE_HDR10_ST2084 = 1000104008
COLOR_SPACE_NAMES = {
    COLOR_SPACE_SRGB_NONLINEAR: "sRGB",
    COLOR_SPACE_EXTENDED_SRGB_LINEAR: "scRGB (extended sRGB linear)",
    COLOR_SPACE_HDR10_ST2084: "HDR10 (ST 2084 PQ)",
}
#: VkExternalMemoryHandleTypeFlagBits / VkExternalSemaphoreHandleTypeFlagBits: OPAQUE_FD.
HANDLE_OPAQUE_FD = 1
#: VkImageUsageFlagBits the host reads an image with.
USAGE_TRANSFER_SRC = 0x1
USAGE_SAMPLED = 0x4
#: VkImageCreateFlagBits: MUTABLE_FORMAT.
IMAGE_MUTABLE_FORMAT = 0x8
#: The formats the host streams, as the encoder's PyAV pixel format names (sRGB formats hold the same bytes; the
#: 10-bit ones are packed in a little-endian word, alpha in its top two bits, as FFmpeg's x2bgr10le/x2rgb10le).
VK_FORMAT_AV_NAMES = {
    VkFormat.A2B10G10R10_UNORM_PACK32: "x2bgr10le",
    VkFormat.A2R10G10B10_UNORM_PACK32: "x2rgb10le",
    VkFormat.R8G8B8A8_UNORM: "rgba",
    VkFormat.R8G8B8A8_SRGB: "rgba",
    VkFormat.A8B8G8R8_UNORM_PACK32: "rgba",  # packed ABGR in a little-endian word: bytes R, G, B, A
    VkFormat.A8B8G8R8_SRGB_PACK32: "rgba",
    VkFormat.B8G8R8A8_UNORM: "bgra",
    VkFormat.B8G8R8A8_SRGB: "bgra",
}
#: The 10-bit formats (an HDR10 swapchain's, or a 10-bit SDR one's).
TEN_BIT_FORMATS = frozenset({VkFormat.A2B10G10R10_UNORM_PACK32, VkFormat.A2R10G10B10_UNORM_PACK32})
_SRGB_PAIRS = {
    VkFormat.R8G8B8A8_SRGB: VkFormat.R8G8B8A8_UNORM,
    VkFormat.B8G8R8A8_SRGB: VkFormat.B8G8R8A8_UNORM,
    VkFormat.A8B8G8R8_SRGB_PACK32: VkFormat.A8B8G8R8_UNORM_PACK32,
}


@dataclass(frozen=True, slots=True)
class Device(CaptureMessage):
    """The GPU the layer's images live on: its IDs as ``VkPhysicalDeviceIDProperties`` gives them."""

    TYPE = MessageType.DEVICE
    PAYLOAD = struct.Struct("<16s16s8sI")
    device_uuid: bytes
    driver_uuid: bytes
    luid: bytes
    luid_valid: int


@dataclass(frozen=True, slots=True)
class VulkanImageGroup(CaptureMessage):
    """``num_images`` 2D images (one level, one layer) in exported Vulkan memory; one memory fd each rides along."""

    TYPE = MessageType.IMAGE_GROUP
    PAYLOAD = struct.Struct("<9I15IQ")
    num_images: int
    width: int
    height: int
    vk_format: int
    vk_color_space: int
    usage: int
    flags: int
    memory_type: int
    num_view_formats: int
    view_formats: tuple[int, ...] = (0,) * 15
    drm_modifier: int = 0

    MAX_IMAGES: ClassVar[int] = MAX_FDS
    MAX_SIDE: ClassVar[int] = 8192

    def __post_init__(self) -> None:
        if len(self.view_formats) > 15:
            raise FieldError(f"{len(self.view_formats)} view formats; at most 15 fit")
        object.__setattr__(self, "view_formats", (*self.view_formats, *(0,) * (15 - len(self.view_formats))))

    def payload(self) -> bytes:
        head = (self.num_images, self.width, self.height, self.vk_format, self.vk_color_space, self.usage)
        formats = self.view_formats
        return self.PAYLOAD.pack(
            *head, self.flags, self.memory_type, self.num_view_formats, *formats, self.drm_modifier
        )

    @classmethod
    def parse_payload(cls, data: Buffer) -> VulkanImageGroup:
        cls.check_length(data)
        v = cls.PAYLOAD.unpack(data)
        group = cls(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], tuple(v[9:24]), v[24])
        group.check()
        return group

    def check(self) -> None:
        if not 1 <= self.num_images <= self.MAX_IMAGES:
            raise FieldError(f"an image group has 1..{self.MAX_IMAGES} images, not {self.num_images}")
        if not (1 <= self.width <= self.MAX_SIDE and 1 <= self.height <= self.MAX_SIDE):
            raise FieldError(f"image size {self.width}x{self.height} is outside 1..{self.MAX_SIDE}")
        if self.num_view_formats > 15:
            raise FieldError(f"{self.num_view_formats} view formats; at most 15 fit")

    @property
    def formats(self) -> tuple[int, ...]:
        return tuple(self.view_formats[: self.num_view_formats])

    def problem(self) -> str | None:
        """Why the host cannot stream these images (None: it can), checked as PyroFling's server checks them."""
        if not self.usage & USAGE_SAMPLED or not self.usage & USAGE_TRANSFER_SRC:
            return f"images need SAMPLED and TRANSFER_SRC usage (got {self.usage:#x})"
        if self.memory_type != HANDLE_OPAQUE_FD:
            return f"only OPAQUE_FD memory is supported (got handle type {self.memory_type:#x})"
        space = COLOR_SPACE_NAMES.get(self.vk_color_space)
        if space is None:
            return f"unknown colour space {self.vk_color_space}"
        name = VkFormat(self.vk_format).name if self.vk_format in VkFormat._value2member_map_ else "?"
        if self.vk_color_space == COLOR_SPACE_EXTENDED_SRGB_LINEAR:
            return f"{space} is not supported yet: this host streams SDR and HDR10 (set the game's HDR to HDR10)"
        if self.vk_format not in VK_FORMAT_AV_NAMES:
            return (
                f"format {self.vk_format} ({name}) is not supported: use an 8-bit UNORM or SRGB format, "
                "or A2B10G10R10 / A2R10G10B10"
            )
        if self.hdr10 and self.vk_format not in TEN_BIT_FORMATS:
            return f"HDR10 needs a 10-bit format (A2B10G10R10 or A2R10G10B10), not {name}"
        if self.vk_format in _SRGB_PAIRS and not self.flags & IMAGE_MUTABLE_FORMAT:
            return f"sRGB format {VkFormat(self.vk_format).name} must be created with MUTABLE_FORMAT"
        return None

    @property
    def av_name(self) -> str:
        return VK_FORMAT_AV_NAMES[VkFormat(self.vk_format)]

    @property
    def hdr10(self) -> bool:
        """The images hold HDR10: BT.2020 primaries, ST 2084 (PQ) code values."""
        return self.vk_color_space == COLOR_SPACE_HDR10_ST2084


@dataclass(frozen=True, slots=True)
class VulkanPresentImage(CaptureMessage):
    """A present from PyroFling's layer: the release barrier it did (old → new layout) and, when
    ``semaphore_type`` is not 0, a release semaphore (one fd) the host waits on before reading."""

    TYPE = MessageType.PRESENT_IMAGE
    PAYLOAD = struct.Struct("<QHHIIIQ")
    image_group_serial: int
    period: int
    index: int
    semaphore_type: int
    old_layout: int
    new_layout: int
    present_id: int

    def check(self) -> None:
        if self.present_id == 0:
            raise FieldError("present ids start at 1")

    def as_present(self) -> PresentImage:
        """The same present as the swapchain core takes it."""
        return PresentImage(self.image_group_serial, self.period, self.index, 0, self.present_id)


def gamepad_event(state: GamepadState) -> bytes:
    """A GAMEPAD_STATE event: the state the host applied to its pad, as the viewer sent it (protocol.md §2.3)."""
    return pack(0, MessageType.GAMEPAD_STATE, state.payload())


def parse_gamepad_event(payload: Buffer) -> GamepadState:
    return GamepadState.parse_payload(payload)


@dataclass(frozen=True, slots=True)
class PadStateEvent(CaptureMessage):
    """pyrofling: the state the host applied to pad ``pad`` (2..; pad 1 comes as GAMEPAD_STATE), protocol.md
    §8.5: the pad's number, then a GAMEPAD_STATE payload."""

    TYPE = MessageType.PAD_STATE
    PAYLOAD = struct.Struct("<B3x16s")
    pad: int
    state: bytes

    def gamepad(self) -> GamepadState:
        return GamepadState.parse_payload(self.state)


@dataclass(frozen=True, slots=True)
class RumbleRequest(CaptureMessage):
    """pyrofling, game → host, no reply (protocol.md §8.5): rumble pad ``pad``'s player's pad (0 stops)."""

    TYPE = MessageType.RUMBLE
    PAYLOAD = struct.Struct("<B3xHHHH")
    pad: int
    strong: int
    weak: int
    duration_ms: int
    reserved: int = 0


@dataclass(frozen=True, slots=True)
class InputEvent(CaptureMessage):
    """pyrofling: what the host applied to its keyboard and mouse (protocol.md §8.5): the keys and buttons held
    after it, this update's motion and wheel, and the pointer's place over the picture when known."""

    TYPE = MessageType.INPUT_EVENT
    PAYLOAD = struct.Struct("<32sBBiiiiHHH")
    keys: bytes  # bit k of byte k // 8: Linux key code k is held
    buttons: int  # bit 0 left, 1 right, 2 middle, 3 side, 4 extra
    flags: int  # bit 0: abs_x / abs_y hold the pointer's place
    dx: int
    dy: int
    wheel: int
    hwheel: int
    abs_x: int
    abs_y: int
    reserved: int = 0

    def held(self) -> frozenset[int]:
        return held_keys(self.keys)


@dataclass(frozen=True, slots=True)
class AudioFormat(CaptureMessage):
    """Audio will follow as interleaved S16LE at this rate and channel count."""

    TYPE = MessageType.AUDIO_FORMAT
    PAYLOAD = struct.Struct("<II")
    rate: int
    channels: int

    def check(self) -> None:
        if not 8000 <= self.rate <= 192_000 or self.channels not in (1, 2):
            raise FieldError(f"audio must be 8000..192000 Hz, 1 or 2 channels (got {self.rate} Hz, {self.channels})")


def error_text(payload: Buffer) -> str:
    """The reason an error reply carries (pyrofling sends one; PyroFling sends none)."""
    return bytes(payload).decode(errors="replace")


PAYLOADS: dict[int, type[CaptureMessage]] = {
    cls.TYPE: cls
    for cls in (
        ClientHello,
        ServerHello,
        ImageGroup,
        PresentImage,
        AcquireImage,
        RetireImage,
        FrameComplete,
        AudioFormat,
        InputEvent,
        PadStateEvent,
        RumbleRequest,
    )
}
#: A Vulkan layer's messages where they differ from pyrofling's (the same numbers, other payloads).
VULKAN_PAYLOADS: dict[int, type[CaptureMessage]] = {
    **PAYLOADS,
    **{cls.TYPE: cls for cls in (Device, VulkanImageGroup, VulkanPresentImage)},
}
